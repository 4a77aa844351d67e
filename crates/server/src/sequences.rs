//! `GET/POST /api/v1/sequences`, `GET/DELETE /api/v1/sequences/{name}`:
//! the saved tool sequences, for scripts and the dashboard. Creation runs
//! the same checks as `seq_create` and `homeagent seq create`.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use homeagent_seq::{CreateError, SeqStore, StoreError, create_sequence, parse_sequence_value};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::http::{ApiPath, json_body, json_ok};
use crate::state::ServerState;

fn store(state: &ServerState) -> SeqStore {
    let data_dir = state
        .runtime()
        .store()
        .path()
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    SeqStore::new(&data_dir)
}

fn store_error(error: StoreError) -> ApiError {
    match error {
        StoreError::NotFound { .. } => ApiError::not_found(error.to_string()),
        StoreError::BadName { .. } | StoreError::Cycle { .. } | StoreError::TooDeep { .. } => {
            ApiError::bad_request("invalid_sequence", error.to_string())
        }
        other => ApiError::internal(other.to_string()),
    }
}

pub async fn list(State(state): State<ServerState>) -> Response {
    match store(&state).list() {
        Ok(listed) => {
            // A damaged file is listed with its error rather than hiding
            // the others.
            let sequences: Vec<Value> = listed
                .iter()
                .map(|(name, seq)| match seq {
                    Ok(seq) => homeagent_seq::create::summary(seq),
                    Err(e) => json!({"name": name, "error": e.to_string()}),
                })
                .collect();
            json_ok(&json!({"sequences": sequences}))
        }
        Err(e) => store_error(e).into_response(),
    }
}

pub async fn get(State(state): State<ServerState>, ApiPath(name): ApiPath<String>) -> Response {
    match store(&state).load(&name) {
        // The authoring form: what a POST takes back.
        Ok(seq) => json_ok(&seq.to_author_value()),
        Err(e) => store_error(e).into_response(),
    }
}

pub async fn create(
    State(state): State<ServerState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let value: Value = match json_body(body, state.options().body_limit) {
        Ok(value) => value,
        Err(e) => return e.into_response(),
    };
    let seq = match parse_sequence_value(&value) {
        Ok(seq) => seq,
        Err(e) => return ApiError::bad_request("invalid_sequence", e.to_string()).into_response(),
    };
    match create_sequence(&store(&state), &seq, Some(state.tools())) {
        Ok(warnings) => (
            StatusCode::CREATED,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            json!({
                "name": seq.name,
                "warnings": warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
            })
            .to_string(),
        )
            .into_response(),
        Err(CreateError::Store(e)) => store_error(e).into_response(),
        Err(e) => ApiError::bad_request("invalid_sequence", e.to_string()).into_response(),
    }
}

pub async fn delete(State(state): State<ServerState>, ApiPath(name): ApiPath<String>) -> Response {
    match store(&state).delete(&name) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => store_error(e).into_response(),
    }
}
