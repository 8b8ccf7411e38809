//! A compact cl100k token counter: the same counts as tiktoken's `encode_ordinary`, in about
//! 2 MiB instead of the ~32 MiB an in-memory BPE encoder takes.
//!
//! How it counts (tiktoken's rule, re-implemented): the text is split into pieces by cl100k's
//! pattern; a piece that is a token is one token; any other piece starts as single bytes (every
//! byte is a cl100k token) and the adjacent pair whose joined bytes have the lowest rank is merged,
//! leftmost first, until no adjacent pair is a token. The piece's count is the parts left.
//!
//! The merge keeps the candidate pairs in a binary heap (stale entries are skipped when popped),
//! so a piece of n bytes costs O(n log n): a hostile tool output made of one enormous piece (a
//! megabyte of punctuation) cannot make counting quadratic.
//!
//! The vocabulary is laid out by `actors/build.rs` (ranks from the `bpe-openai` crate, a build
//! dependency only) and embedded in the binary: token bytes in rank order, their offsets, and an
//! open-addressing table from bytes to rank. Nothing is built at run time except the split
//! pattern (a few milliseconds, on first use).
//!
//! Exactness is checked against two independent encoders (`tiktoken-rs` and `bpe-openai`) in the
//! tests below.

use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::LazyLock;

include!("cl100k_hash.rs");

static OFFSETS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_offsets.bin"));
static BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_bytes.bin"));
static TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_table.bin"));

/// cl100k's split pattern, as alternatives tried together. Its `\s+(?!\S)` (whitespace not
/// followed by a non-space) has no look-ahead in this regex engine; it is written as `\s+\s`,
/// whose match gives back its last character (the `true` beside it), and `\s+$`.
const SPLIT: [(&str, bool); 3] = [
    (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+$",
        false,
    ),
    (r"\s+\s", true),
    (r"\s+", false),
];

static SPLITTER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new_many(&SPLIT.map(|(p, _)| p)).expect("cl100k's split pattern is a valid regex"));

fn word(data: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([data[4 * i], data[4 * i + 1], data[4 * i + 2], data[4 * i + 3]])
}

fn token(rank: u32) -> &'static [u8] {
    let i = rank as usize;
    &BYTES[word(OFFSETS, i) as usize..word(OFFSETS, i + 1) as usize]
}

/// The rank of the token whose bytes are `bytes`, if there is one.
pub fn rank(bytes: &[u8]) -> Option<u32> {
    let mut slot = slot_of(bytes);
    loop {
        match word(TABLE, slot) {
            0 => return None,
            v if token(v - 1) == bytes => return Some(v - 1),
            _ => slot = (slot + 1) & (TABLE_SLOTS - 1),
        }
    }
}

/// Build the split pattern now rather than in the first count.
pub fn warm_up() {
    LazyLock::force(&SPLITTER);
}

/// The pieces of `text` by cl100k's split pattern.
fn pieces(text: &str) -> impl Iterator<Item = &str> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= text.len() {
            return None;
        }
        let start = at;
        // The pattern covers every character; should a piece ever not match, the rest of the
        // text is one piece, counted at most one token per byte (never undercounted).
        let mut end = text.len();
        if let Some(m) = SPLITTER.find(Input::new(&text[at..]).anchored(Anchored::Yes)) {
            end = at + m.end();
            if SPLIT[m.pattern().as_usize()].1 {
                end -= text[start..end].chars().next_back().map_or(0, char::len_utf8);
            }
        }
        if end <= start {
            end = text.len();
        }
        at = end;
        Some(&text[start..end])
    })
}

/// Scratch space of the merge, reused between pieces.
#[derive(Default)]
struct Merge {
    /// `next[i]`: where the part starting at byte `i` ends (the next part's start).
    next: Vec<u32>,
    /// `prev[i]`: the start of the part before the one starting at `i`.
    prev: Vec<u32>,
    /// `pair[i]`: rank of the part at `i` joined with the next one (`NONE` when not a token).
    pair: Vec<u32>,
    /// Whether the part starting at `i` was merged into the one before it.
    gone: Vec<bool>,
    heap: BinaryHeap<Reverse<(u32, u32)>>,
}

const NONE: u32 = u32::MAX;

impl Merge {
    /// Tokens of a piece that is not itself a token.
    fn count(&mut self, piece: &[u8]) -> u64 {
        let n = piece.len();
        self.next.clear();
        self.next.extend(1..=n as u32);
        self.prev.clear();
        self.prev.extend((0..n as u32).map(|i| i.wrapping_sub(1)));
        self.gone.clear();
        self.gone.resize(n, false);
        self.pair.clear();
        self.heap.clear();
        for i in 0..n {
            let r = if i + 1 < n { rank(&piece[i..i + 2]).unwrap_or(NONE) } else { NONE };
            self.pair.push(r);
            if r != NONE {
                self.heap.push(Reverse((r, i as u32)));
            }
        }
        let mut parts = n as u64;
        while let Some(Reverse((r, i))) = self.heap.pop() {
            let i = i as usize;
            if self.gone[i] || self.pair[i] != r {
                continue;
            }
            // Merge the part at `i` with the next one.
            let j = self.next[i] as usize;
            self.gone[j] = true;
            self.next[i] = self.next[j];
            let after = self.next[i] as usize;
            if after < n {
                self.prev[after] = i as u32;
            }
            parts -= 1;
            self.pair[i] = self.joined(piece, i);
            if i > 0 {
                let p = self.prev[i] as usize;
                self.pair[p] = self.joined(piece, p);
            }
        }
        parts
    }

    /// Rank of the part at `i` joined with its next part; pushes it as a candidate.
    fn joined(&mut self, piece: &[u8], i: usize) -> u32 {
        let j = self.next[i] as usize;
        if j >= piece.len() {
            return NONE;
        }
        let end = self.next[j] as usize;
        let r = rank(&piece[i..end]).unwrap_or(NONE);
        if r != NONE {
            self.heap.push(Reverse((r, i as u32)));
        }
        r
    }
}

thread_local! {
    static SCRATCH: RefCell<Merge> = RefCell::new(Merge::default());
}

/// The cl100k count of `text` (tiktoken's `encode_ordinary(text).len()`).
pub fn count(text: &str) -> u64 {
    SCRATCH.with(|m| {
        let mut m = m.borrow_mut();
        pieces(text)
            .map(|p| {
                let b = p.as_bytes();
                if b.len() == 1 || rank(b).is_some() { 1 } else { m.count(b) }
            })
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(text: &str) -> u64 {
        tiktoken_rs::cl100k_base_singleton().encode_ordinary(text).len() as u64
    }

    #[test]
    fn every_rank_is_found_by_its_bytes() {
        let n = OFFSETS.len() / 4 - 1;
        assert_eq!(n, 100_256, "cl100k has 100,256 ordinary tokens");
        for r in 0..n as u32 {
            assert_eq!(rank(token(r)), Some(r), "token {r}");
        }
        assert_eq!(rank(b"no such token in cl100k at all, surely"), None);
    }

    #[test]
    fn counts_equal_tiktoken_on_text_code_json_and_scripts() {
        let samples = [
            "",
            " ",
            "hello world",
            "Hello, World! It's 2026; we'll see what they've done.",
            "fn main() {\n    println!(\"{x}\");\n}\n\n\n   \t trailing   ",
            "{\"role\":\"tool\",\"content\":[{\"type\":\"text\",\"text\":\"naïve café 日本語 — ok\"}]}",
            "1234567890 12 3.14159 0x1F 1e-9",
            "   leading spaces\r\n\r\nwindows\rlines  \n  ",
            "🦀🦀 emoji 👩‍👩‍👧 and Ω≈ç√∫˜µ≤≥÷ and Ελληνικά and العربية",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!??????????////////////\\\\\\\\",
            "Supercalifragilisticexpialidocious antidisestablishmentarianism",
            "src/actors/spend/cl100k.rs:42:7: warning: unused variable `x`",
            "'S 'T 'RE 'Ve 'm 'LL 'd",
        ];
        for s in samples {
            assert_eq!(count(s), reference(s), "{s:?}");
        }
    }

    #[test]
    fn counts_equal_tiktoken_on_random_text() {
        let alphabet: Vec<char> =
            "abcXYZ019 \n\r\t'.,;:!?-_/\\{}[]\"éß日本€🦀\u{a0}\u{2003}sStTreREvem ll d".chars().collect();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..400 {
            let len = 1 + (round * 7) % 300;
            let text: String = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    alphabet[(x % alphabet.len() as u64) as usize]
                })
                .collect();
            assert_eq!(count(&text), reference(&text), "{text:?}");
        }
    }

    #[test]
    fn a_huge_single_piece_is_counted_in_n_log_n_and_exactly() {
        // One piece of 400 KB (no letters, digits or spaces): tiktoken's own merge is quadratic
        // here; ours must finish and agree with a linear reference (bpe-openai).
        let text: String = "!@#$%^&*()".repeat(40_000);
        let ours = count(&text);
        assert_eq!(ours, bpe_openai::cl100k_base().count(text.as_str()) as u64);
        assert!(ours > 0 && ours <= text.len() as u64);
    }
}
