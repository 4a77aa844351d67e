//! The client side: connecting to servers, supervising them, and showing
//! their tools to the kernel.

mod call;
mod connect;
pub mod convert;
pub mod manager;
mod pages;
mod supervise;
