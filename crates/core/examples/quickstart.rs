//! The kernel in thirty lines: register a tool, assemble a streamed turn with
//! two interleaved calls, run the batch, print the messages for the next
//! request.
//!
//! Run with `cargo run -p homeagent-core --example quickstart`.

use std::sync::Arc;

use homeagent_core::{
    BatchContext, Executor, Registry, StreamAssembler, StreamEvent, ToolCallFragment, ToolContext,
    ToolDef, check_pairing,
};
use serde_json::json;

fn fragment(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> StreamEvent {
    StreamEvent::ToolCall(ToolCallFragment {
        stream_index: Some(index),
        id: id.map(str::to_owned),
        name: name.map(str::to_owned),
        raw_arguments: args.to_owned(),
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tools = Registry::new();
    tools.register(
        ToolDef::new("weather", "Current weather for a city")
            .with_parameters(json!({
                "type": "object",
                "properties": {"city": {"type": "string", "description": "the city"}},
                "required": ["city"]
            }))
            .parallel_safe(),
        |ctx: ToolContext| async move { Ok(json!({"city": ctx.arguments["city"], "sky": "clear"})) },
    )?;

    // What a provider codec would produce: two calls, interleaved on the wire.
    let mut assembler = StreamAssembler::new();
    for event in [
        fragment(0, Some("call_a"), Some("weather"), "{\"city\":"),
        fragment(1, Some("call_b"), Some("weather"), "{\"city\":\"Oslo\"}"),
        fragment(0, None, None, "\"Paris\"}"),
        StreamEvent::Finish {
            reason: "tool_calls".into(),
        },
    ] {
        assembler.push(event);
    }
    let turn = assembler.finish();

    let executor = Executor::new(Arc::new(tools));
    let batch = executor.run(&turn, &BatchContext::default()).await;
    println!("ran as {:?}", batch.mode);
    let messages = batch.messages();
    check_pairing(&messages)?;
    for message in &messages {
        println!("{}", serde_json::to_string(message)?);
    }
    Ok(())
}
