//! One entry of the route table ([`super::routes`]): how a route is served
//! and what the document says of it, built in one chain
//! (`ApiRoute::get(..).query::<Q>().answers::<A>()`).

use std::sync::Arc;

use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{delete, get, post, put, MethodRouter};
use schemars::{JsonSchema, Schema, SchemaGenerator};

use super::auth::Access;
use crate::GatewayState;

/// A schema, made by the generator the document uses.
pub type BodySchema = fn(&mut SchemaGenerator) -> Schema;

/// The schema of `T` (a reference to its definition for a named type).
fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// The schema of `T` itself, for parameters read property by property.
fn inline<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    T::json_schema(generator)
}

/// The body a route reads.
#[derive(Clone, Copy)]
pub struct RequestBody {
    pub schema: BodySchema,
    pub description: &'static str,
    /// Whether an empty body is refused (else it reads as `{}`).
    pub required: bool,
}

/// When a route answers 503, and with what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Never: it needs nothing but the process.
    Never,
    /// `unavailable`: NATS (or ClickHouse, for the metrics) did not answer.
    Dependency,
    /// `history_unavailable` (or `unavailable`): it reads ClickHouse.
    History,
    /// The readiness report itself, `ok: false`.
    NotReady,
}

/// One route: how to serve it and how to describe it.
pub struct ApiRoute {
    pub method: Method,
    pub path: &'static str,
    pub access: Access,
    pub summary: &'static str,
    /// Its path captures, one property each.
    pub path_params: Option<BodySchema>,
    /// Its query parameters, one property each.
    pub query: Option<BodySchema>,
    /// The request headers it reads, one property each.
    pub headers: Option<BodySchema>,
    /// The JSON body it reads, if any.
    pub body: Option<RequestBody>,
    /// Status of a successful answer.
    pub ok_status: u16,
    /// The other status of a successful answer (a create's replace).
    pub other_ok_status: Option<u16>,
    /// The schema of a successful answer, where the operation has a type.
    pub answer: Option<BodySchema>,
    /// Whether a successful answer is Prometheus text, not JSON.
    pub answers_text: bool,
    /// When it answers 503.
    pub unavailable: Unavailable,
    /// Whether it answers 404 when what the path names is not there.
    pub finds: bool,
    /// Whether it answers 409: a compare-and-swap lost, a limit reached.
    pub conflicts: bool,
    /// Rules between its parameters and fields no schema states
    /// (`x-jetcron-rules`, [`super::openapi::RULES`]).
    pub rules: &'static [&'static str],
    pub(super) handler: MethodRouter<Arc<GatewayState>>,
}

impl ApiRoute {
    /// `GET path`, open to `access`: answers 200 and reads nothing but
    /// what it is told to.
    pub fn get<H: Handler<T, Arc<GatewayState>>, T: 'static>(
        path: &'static str,
        access: Access,
        summary: &'static str,
        handler: H,
    ) -> Self {
        Self::new(Method::GET, path, access, summary, get(handler))
    }

    /// `POST path` (see [`ApiRoute::get`]).
    pub fn post<H: Handler<T, Arc<GatewayState>>, T: 'static>(
        path: &'static str,
        access: Access,
        summary: &'static str,
        handler: H,
    ) -> Self {
        Self::new(Method::POST, path, access, summary, post(handler))
    }

    /// `PUT path` (see [`ApiRoute::get`]).
    pub fn put<H: Handler<T, Arc<GatewayState>>, T: 'static>(
        path: &'static str,
        access: Access,
        summary: &'static str,
        handler: H,
    ) -> Self {
        Self::new(Method::PUT, path, access, summary, put(handler))
    }

    /// `DELETE path` (see [`ApiRoute::get`]).
    pub fn delete<H: Handler<T, Arc<GatewayState>>, T: 'static>(
        path: &'static str,
        access: Access,
        summary: &'static str,
        handler: H,
    ) -> Self {
        Self::new(Method::DELETE, path, access, summary, delete(handler))
    }

    fn new(
        method: Method,
        path: &'static str,
        access: Access,
        summary: &'static str,
        handler: MethodRouter<Arc<GatewayState>>,
    ) -> Self {
        Self {
            method,
            path,
            access,
            summary,
            path_params: None,
            query: None,
            headers: None,
            body: None,
            ok_status: 200,
            other_ok_status: None,
            answer: None,
            answers_text: false,
            unavailable: Unavailable::Dependency,
            finds: false,
            conflicts: false,
            rules: &[],
            handler,
        }
    }

    /// Its path captures are the properties of `T`.
    pub fn path<T: JsonSchema>(mut self) -> Self {
        self.path_params = Some(inline::<T>);
        self
    }

    /// Its query parameters are the properties of `T`.
    pub fn query<T: JsonSchema>(mut self) -> Self {
        self.query = Some(inline::<T>);
        self
    }

    /// The request headers it reads are the properties of `T`.
    pub fn headers<T: JsonSchema>(mut self) -> Self {
        self.headers = Some(inline::<T>);
        self
    }

    /// It reads a JSON body that is a `T`, described as `description`.
    pub fn body<T: JsonSchema>(self, description: &'static str) -> Self {
        self.body_schema(schema::<T>, description, true)
    }

    /// It may read a JSON body that is a `T`; an empty one reads as `{}`.
    pub fn optional_body<T: JsonSchema>(self, description: &'static str) -> Self {
        self.body_schema(schema::<T>, description, false)
    }

    /// It reads a JSON body of the schema `schema` makes.
    pub fn body_schema(
        mut self,
        schema: BodySchema,
        description: &'static str,
        required: bool,
    ) -> Self {
        self.body = Some(RequestBody {
            schema,
            description,
            required,
        });
        self
    }

    /// A successful answer has this status (not 200).
    pub fn status(mut self, ok_status: u16) -> Self {
        self.ok_status = ok_status;
        self
    }

    /// A successful answer may also have this status.
    pub fn or_status(mut self, status: u16) -> Self {
        self.other_ok_status = Some(status);
        self
    }

    /// The successful answer is a `T` (the operation's reply type).
    pub fn answers<T: JsonSchema>(mut self) -> Self {
        self.answer = Some(schema::<T>);
        self
    }

    /// The successful answer has the schema `schema` makes.
    pub fn answers_schema(mut self, schema: BodySchema) -> Self {
        self.answer = Some(schema);
        self
    }

    /// The successful answer is Prometheus text.
    pub fn answers_text(mut self) -> Self {
        self.answers_text = true;
        self
    }

    /// It needs an answer from ClickHouse ([`crate::sql::reads`]).
    pub fn reads_history(mut self) -> Self {
        self.unavailable = Unavailable::History;
        self
    }

    /// It needs nothing but the process: never a 503.
    pub fn standalone(mut self) -> Self {
        self.unavailable = Unavailable::Never;
        self
    }

    /// Its 503 is the readiness report with `ok: false`.
    pub fn not_ready_answer(mut self) -> Self {
        self.unavailable = Unavailable::NotReady;
        self
    }

    /// It answers 404 when what its path names is not there.
    pub fn finds(mut self) -> Self {
        self.finds = true;
        self
    }

    /// It answers 409 when a compare-and-swap loses or a limit is reached.
    pub fn conflicts(mut self) -> Self {
        self.conflicts = true;
        self
    }

    /// Rules between its parameters and fields ([`super::openapi::RULES`]).
    pub fn rules(mut self, rules: &'static [&'static str]) -> Self {
        self.rules = rules;
        self
    }
}
