//! A request body as the operation's typed request: the one decoder of the
//! NATS service and the HTTP handlers, so both refuse the same bodies with
//! the same field-named errors; and the compare-and-swap revision a put body
//! of a job or a channel may carry.

use jetcron_core::api::ApiError;

/// `body` (a JSON object) as a `T`; an error names the field where decoding
/// stopped.
pub fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    // serde would also read a request struct from a positional array.
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(ApiError::malformed(
            "the request body must be a JSON object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| ApiError::undecodable(&e))
}

/// Take a top-level `expected_revision` out of a put body: the definition to
/// store (re-encoded, only when the field was there) and the revision.
pub fn split_expected_revision(body: &[u8]) -> Result<(Option<Vec<u8>>, Option<u64>), ApiError> {
    // Cheap check first: most bodies do not carry the field.
    if !body.windows(17).any(|w| w == b"expected_revision") {
        return Ok((None, None));
    }
    let Ok(serde_json::Value::Object(mut definition)) = serde_json::from_slice(body) else {
        // Not an object: the parser reports it.
        return Ok((None, None));
    };
    let Some(value) = definition.remove("expected_revision") else {
        return Ok((None, None));
    };
    let revision = value.as_u64().ok_or_else(|| {
        ApiError::invalid_field(
            "expected_revision",
            format!("must be a revision number (0: the job must not exist yet), got {value}"),
        )
    })?;
    let bytes = serde_json::to_vec(&definition)
        .map_err(|e| ApiError::internal("encode the definition", e))?;
    Ok((Some(bytes), Some(revision)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_revision_is_taken_out_of_the_definition() {
        let (stored, revision) =
            split_expected_revision(br#"{"id":"a","expected_revision":4,"schedule":"@daily"}"#)
                .expect("valid");
        assert_eq!(revision, Some(4));
        let stored: serde_json::Value =
            serde_json::from_slice(&stored.expect("re-encoded")).expect("json");
        assert_eq!(stored, serde_json::json!({"id":"a","schedule":"@daily"}));
        assert_eq!(
            split_expected_revision(br#"{"id":"a"}"#).expect("valid"),
            (None, None)
        );
        let err = split_expected_revision(br#"{"expected_revision":"4"}"#).expect_err("string");
        assert_eq!(err.field.as_deref(), Some("expected_revision"));
    }
}
