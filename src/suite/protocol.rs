//! The protocols a workload may speak, as the suite writes them:
//! `workload.resp`, `http`, `postgres` or `adapter` (see
//! `crate::protocol` for what each does on the wire).

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use super::values::Dur;

/// `workload.resp`: Redis's protocol.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RespTarget {
    /// `HOST:PORT`, e.g. `127.0.0.1:${PORT}`.
    pub target: String,
}

/// `workload.http`: a key-value store behind HTTP requests made from
/// templates. In a request's path, body and headers, `${key}`,
/// `${key.base64}`, `${key.hex}` and `${key.url}` are the key, and in a
/// write's body and headers `${value}`, `${value.base64}` and
/// `${value.hex}` its value; the suite's own variables (`${PORT}`...)
/// work too.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpSpec {
    /// Where requests go: `http://HOST:PORT`, and a path every request's
    /// path is put after (`http://127.0.0.1:${PORT}/bucket`).
    pub url: String,
    /// Headers of every request, e.g. `{ content-type: application/json }`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The write: PUT by default.
    pub write: HttpRequest,
    /// The read: GET by default.
    pub read: HttpRequest,
    /// The delete: DELETE by default; needed when the mix deletes.
    pub delete: Option<HttpRequest>,
    /// Where a read's value is: the whole body (the default), or `{ json:
    /// /kvs/0/value }` (a JSON pointer; pointing at nothing means the key
    /// is missing); `decode: base64` or `hex` when it is encoded.
    #[serde(default)]
    pub value: HttpValue,
    /// Which statuses mean what (a list each of codes, classes such as
    /// `4xx`, or ranges such as `400-499`).
    #[serde(default)]
    pub status: HttpStatus,
    /// Requests made on each new connection before the load's: a bucket
    /// created, a schema installed (any status below 500 will do).
    #[serde(default)]
    pub setup: Vec<HttpRequest>,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpRequest {
    pub method: Option<String>,
    /// From `/`, after the URL's own path.
    #[serde(default)]
    pub path: String,
    pub body: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpValue {
    /// A JSON pointer (RFC 6901) to the value in the reply's body.
    pub json: Option<String>,
    #[serde(default)]
    pub decode: crate::protocol::http::Decode,
}

impl JsonSchema for crate::protocol::http::Decode {
    fn schema_name() -> Cow<'static, str> {
        "Decode".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "description": "How the value is encoded in the reply", "enum": ["none", "base64", "hex"] })
    }
}

/// What a reply's status means; each list replaces its default.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpStatus {
    /// A write or delete done (default `[2xx]`).
    pub done: Option<Vec<Status>>,
    /// A read of a key that is not there (default `[404]`); a delete
    /// answered so is done.
    pub missing: Option<Vec<Status>>,
    /// Definitely not done (default `[4xx]`): a write the node refused.
    pub not_done: Option<Vec<Status>>,
    /// May or may not have happened (default `[5xx]`; so is any status
    /// in no list, a timeout and a reset).
    pub unknown: Option<Vec<Status>>,
}

/// A status code (`404`), a class (`4xx`) or a range (`400-499`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status(pub u16, pub u16);

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Status;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a status such as 404, 4xx or 400-499")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Status, E> {
                crate::protocol::http::parse_status(v)
                    .map(|(a, b)| Status(a, b))
                    .map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Status, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Status, E> {
                self.visit_str(&v.to_string())
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for Status {
    fn schema_name() -> Cow<'static, str> {
        "Status".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A status code (404), a class (4xx) or a range (400-499)",
            "anyOf": [{ "type": "integer", "minimum": 100, "maximum": 599 },
                      { "type": "string", "pattern": r"^\s*([1-5]xx|[1-5][0-9][0-9](\s*-\s*[1-5][0-9][0-9])?)\s*$" }]
        })
    }
}

/// `workload.postgres`: a table soak creates in a PostgreSQL database.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostgresSpec {
    /// `postgres://USER[:PASSWORD]@HOST:PORT/DATABASE`.
    pub url: String,
    /// The table soak creates if it is not there (`k text primary key, v
    /// bytea`).
    #[serde(default = "default_table")]
    pub table: String,
}

fn default_table() -> String {
    "soak_kv".into()
}

/// `workload.adapter`: a program of the user's that talks to the node and
/// to soak in JSON lines on its stdin and stdout (docs/src/protocols.md).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdapterSpec {
    /// The argv, templated; never run through a shell.
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `HOST:PORT` of the node, told to the adapter in its `init`; needed
    /// for `network` faults (the proxy stands in).
    pub target: Option<String>,
    /// Anything else to tell the adapter in its `init`.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// How long the adapter has to answer its `init`.
    #[serde(default = "default_init_timeout")]
    pub init_timeout: Dur,
}

fn default_init_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(10))
}
