//! The one-pass writer against the general reading: the same body, byte for byte, or the same
//! error, and the writer answering for the lists the runtime writes
//! ([`guest_http::transcoder_tests`]).

guest_http::transcoder_tests!(super::super::translate, super::messages);
