//! NATS decentralized authentication ("operator mode") for tests: an
//! operator, its accounts and their users, with the JWTs and `.creds` files
//! `nsc` would issue, made here because no `nsc` binary is at hand.
//!
//! A JWT is `base64url(header).base64url(claims).base64url(signature)`, all
//! without padding; the header is `{"typ":"JWT","alg":"ed25519-nkey"}`, the
//! signature is ed25519 over `header.claims` with the issuer's nkey, and the
//! claims follow nats-io/jwt v2: `jti`, `iat`, `iss`, `name`, `sub` and a
//! `nats` object whose `type` (operator, account, user) and `version: 2` say
//! what it is. The `jti` is computed as nats-io/jwt does (unpadded base32 of
//! SHA-512/256 of the other standard claims), although nats-server only
//! reads it.
//!
//! [`NatsOperator::server_config`] is the nats-server configuration that
//! trusts the operator and knows its accounts through a `MEMORY` resolver.

use std::time::{SystemTime, UNIX_EPOCH};

use data_encoding::{BASE32_NOPAD, BASE64URL_NOPAD};
use nkeys::KeyPair;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha512_256};

/// An operator with its system account, and the accounts it issued.
pub struct NatsOperator {
    key: KeyPair,
    jwt: String,
    system_account: NatsAccount,
    /// Accounts the server is told about: (public key, JWT).
    registered: Vec<(String, String)>,
}

/// An account JWT and the key that signs its users.
pub struct NatsAccount {
    key: KeyPair,
    jwt: String,
}

impl NatsOperator {
    /// A self-signed operator named `name`, with a system account `SYS`.
    pub fn new(name: &str) -> Self {
        let key = KeyPair::new_operator();
        let system_key = KeyPair::new_account();
        let jwt = encode(
            &key,
            &key.public_key(),
            name,
            json!({
                "system_account": system_key.public_key(),
                "type": "operator",
                "version": 2,
            }),
        );
        let system_account = NatsAccount::issue(&key, system_key, "SYS", Value::Null);
        let registered = vec![(system_account.public_key(), system_account.jwt.clone())];
        Self {
            key,
            jwt,
            system_account,
            registered,
        }
    }

    /// A new account of this operator, known to the server, whose users may
    /// use JetStream without limits (streams, consumers, memory and disk).
    pub fn account(&mut self, name: &str) -> NatsAccount {
        let account = self.unregistered_account(name);
        self.registered
            .push((account.public_key(), account.jwt.clone()));
        account
    }

    /// An account this operator signed but the server was never told about
    /// (not in [`NatsOperator::server_config`]): its users are strangers.
    pub fn unregistered_account(&self, name: &str) -> NatsAccount {
        let limits = json!({
            "subs": -1, "data": -1, "payload": -1,
            "imports": -1, "exports": -1, "wildcards": true, "conn": -1, "leaf": -1,
            "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
        });
        NatsAccount::issue(&self.key, KeyPair::new_account(), name, limits)
    }

    /// nats-server configuration trusting this operator, with every
    /// registered account preloaded in a `MEMORY` resolver. JetStream is
    /// enabled by the command line [`crate::NatsServer`] starts the server with.
    pub fn server_config(&self) -> String {
        let preload: String = self
            .registered
            .iter()
            .map(|(public_key, jwt)| format!("  {public_key}: \"{jwt}\"\n"))
            .collect();
        format!(
            "operator: \"{}\"\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n{preload}}}\n",
            self.jwt,
            self.system_account.public_key()
        )
    }
}

impl NatsAccount {
    fn issue(operator: &KeyPair, key: KeyPair, name: &str, limits: Value) -> Self {
        let mut nats = json!({
            "default_permissions": { "pub": {}, "sub": {} },
            "type": "account",
            "version": 2,
        });
        if !limits.is_null() {
            nats["limits"] = limits;
        }
        let jwt = encode(operator, &key.public_key(), name, nats);
        Self { key, jwt }
    }

    /// The account's public nkey (`A…`), its id on the server.
    pub fn public_key(&self) -> String {
        self.key.public_key()
    }

    pub fn jwt(&self) -> &str {
        &self.jwt
    }

    /// The text of a `.creds` file for a new user `name` of this account,
    /// allowed everything the account allows.
    pub fn user_creds(&self, name: &str) -> String {
        let user = KeyPair::new_user();
        let jwt = encode(
            &self.key,
            &user.public_key(),
            name,
            json!({
                "pub": {}, "sub": {},
                "subs": -1, "data": -1, "payload": -1,
                "type": "user",
                "version": 2,
            }),
        );
        creds_file(&jwt, &user.seed().expect("a new user key has a seed"))
    }
}

/// A JWT about `subject`, signed by `issuer`, with `nats` as its NATS claims.
pub fn encode(issuer: &KeyPair, subject: &str, name: &str, nats: Value) -> String {
    let issued_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs();
    // The standard claims in nats-io/jwt's field order (aud, exp, jti and
    // nbf empty), hashed without the jti to make the jti.
    let mut claims = json!({
        "iat": issued_at,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
    });
    let hashed = serde_json::to_vec(&claims).expect("claims serialize");
    claims["jti"] = BASE32_NOPAD.encode(&Sha512_256::digest(hashed)).into();
    claims["nats"] = nats;
    let header = BASE64URL_NOPAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let claims = BASE64URL_NOPAD.encode(&serde_json::to_vec(&claims).expect("claims serialize"));
    let signed = format!("{header}.{claims}");
    let signature = issuer.sign(signed.as_bytes()).expect("a seed key signs");
    format!("{signed}.{}", BASE64URL_NOPAD.encode(&signature))
}

/// A `.creds` file as `nsc` writes it: the user JWT, then the user's seed.
pub fn creds_file(user_jwt: &str, user_seed: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{user_seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(jwt: &str) -> Value {
        let part = jwt.split('.').nth(1).expect("three parts");
        serde_json::from_slice(&BASE64URL_NOPAD.decode(part.as_bytes()).expect("base64url"))
            .expect("JSON claims")
    }

    #[test]
    fn a_jwt_is_signed_by_its_issuer_over_header_and_claims() {
        let operator = KeyPair::new_operator();
        let account = KeyPair::new_account();
        let jwt = encode(
            &operator,
            &account.public_key(),
            "A",
            json!({"type": "account", "version": 2}),
        );
        let (signed, signature) = jwt.rsplit_once('.').expect("three parts");
        let signature = BASE64URL_NOPAD
            .decode(signature.as_bytes())
            .expect("base64url");
        KeyPair::from_public_key(&operator.public_key())
            .expect("public key")
            .verify(signed.as_bytes(), &signature)
            .expect("a valid signature");
        let claims = claims(&jwt);
        assert_eq!(claims["iss"], operator.public_key());
        assert_eq!(claims["sub"], account.public_key());
        assert_eq!(claims["nats"]["type"], "account");
        assert_eq!(claims["jti"].as_str().map(str::len), Some(52));
    }

    #[test]
    fn creds_hold_a_user_jwt_of_the_account_and_its_seed() {
        let mut operator = NatsOperator::new("O");
        let account = operator.account("A");
        let creds = account.user_creds("u");
        let mut blocks = creds
            .lines()
            .skip_while(|l| !l.starts_with("-----BEGIN"))
            .filter(|l| !l.starts_with('-') && !l.starts_with('*') && !l.is_empty());
        let jwt = blocks.next().expect("JWT");
        assert_eq!(claims(jwt)["iss"], account.public_key());
        assert_eq!(claims(jwt)["nats"]["type"], "user");
        assert!(creds.contains("\nSU"), "{creds}");
        let config = operator.server_config();
        assert!(config.contains(&account.public_key()), "{config}");
        assert!(config.contains("resolver: MEMORY"), "{config}");
    }
}
