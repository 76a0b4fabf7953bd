//! A request body as the operation's typed request: the one decoder of the
//! NATS service and the HTTP handlers, so both refuse the same bodies with
//! the same field-named errors.

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
