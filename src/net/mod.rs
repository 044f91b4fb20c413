//! What soak speaks on the wire: HTTP ([`http`]) and RESP ([`resp`]), and the
//! ports nodes listen on ([`ports`]).
//! The bottom layer: nothing of soak's below it.

pub mod delay;
pub mod http;
pub mod netns;
pub mod ports;
pub mod resp;

/// An error and its causes on one line ("client error (Connect): tcp
/// connect error: Connection refused (os error 111)").
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        // Some errors print their cause already.
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}
