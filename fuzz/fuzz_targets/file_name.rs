//! Fuzz target: the hand-written file-name rule agrees with DESIGN §4.3's regular expression
//! on any bytes, and the `<Name>` part of an accepted name is its second `_` field.
#![no_main]

use std::sync::OnceLock;

use backplane::plugins::discovery::{FILE_NAME_PATTERN, is_plugin_file_name, name_part};
use libfuzzer_sys::fuzz_target;

fn pattern() -> &'static regex::bytes::Regex {
    static RE: OnceLock<regex::bytes::Regex> = OnceLock::new();
    RE.get_or_init(|| regex::bytes::Regex::new(FILE_NAME_PATTERN).expect("valid pattern"))
}

fuzz_target!(|data: &[u8]| {
    let ours = is_plugin_file_name(data);
    assert_eq!(ours, pattern().is_match(data), "{:?}", String::from_utf8_lossy(data));
    if ours {
        let name = name_part(data).expect("an accepted name has a <Name> part");
        let second = data.split(|&b| b == b'_').nth(1).expect("two fields");
        assert_eq!(name.as_bytes(), second);
    }
});
