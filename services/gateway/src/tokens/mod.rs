//! Scoped API tokens: a role in a namespace, for a team or a machine.
//!
//! An admin of a namespace makes one with `POST /v1/tokens`
//! (`{"namespace","role","expires_in","description"}`); the answer shows the
//! token once. Only the SHA-256 of its secret is kept, in the bucket
//! `jetcron_tokens` (key = the token's id, history kept like the jobs'), so
//! a read of the bucket gives nobody a token. A token is
//! `jct_<id>_<secret>`: the id finds its record, the secret's hash is
//! compared in constant time, and its grant ([`jetcron_core::access::Grant`])
//! is what the request may do. `DELETE /v1/tokens/{id}` revokes it: the
//! record is deleted, and every later request with it is refused, because
//! every request reads the record (no cache to wait out).
//!
//! The tokens of `--api-token` / `--api-token-file` stay what they were:
//! admins of every namespace, for bootstrap ([`crate::http::auth`]).
//!
//! The files: [`record`] (what is kept, the token's text, pure), [`store`]
//! (the bucket), [`requests`] (the operations, checked against the
//! caller's grants).

pub mod record;
pub mod requests;
pub mod store;
