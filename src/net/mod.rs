//! What soak speaks on the wire: HTTP ([`http`]) and RESP ([`resp`]).
//! The bottom layer: nothing of soak's below it.

pub mod http;
pub mod resp;
