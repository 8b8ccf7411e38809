//! Lays out the cl100k vocabulary for `spend::cl100k`, the compact counter the spend meter uses.
//!
//! The ranks come from the `bpe-openai` crate (a build dependency only: its in-memory encoder
//! costs ~32 MiB, which is why the runtime does not load it). Three little-endian files go to
//! `OUT_DIR` and are embedded with `include_bytes!`:
//! - `cl100k_offsets.bin`: `u32` start of each token's bytes, by rank, plus the end;
//! - `cl100k_bytes.bin`: every token's bytes, concatenated in rank order;
//! - `cl100k_table.bin`: `TABLE_SLOTS` `u32` slots, linear probing, `rank + 1` (0 = empty).

include!("src/spend/cl100k_hash.rs");

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/spend/cl100k_hash.rs");
    let bpe = &bpe_openai::cl100k_base().bpe;
    let n = bpe.num_tokens();
    assert!(n < TABLE_SLOTS / 2, "the table must stay under half full");
    let mut offsets = Vec::with_capacity((n + 1) * 4);
    let mut bytes = Vec::new();
    let mut table = vec![0u32; TABLE_SLOTS];
    for rank in 0..n as u32 {
        let token = bpe.token_bytes(rank);
        offsets.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        bytes.extend_from_slice(token);
        let mut slot = slot_of(token);
        while table[slot] != 0 {
            let other = table[slot] - 1;
            assert_ne!(bpe.token_bytes(other), token, "cl100k tokens are distinct");
            slot = (slot + 1) & (TABLE_SLOTS - 1);
        }
        table[slot] = rank + 1;
    }
    offsets.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR is set for build scripts"));
    let table: Vec<u8> = table.iter().flat_map(|v| v.to_le_bytes()).collect();
    for (name, data) in [("cl100k_offsets.bin", &offsets), ("cl100k_bytes.bin", &bytes), ("cl100k_table.bin", &table)] {
        std::fs::write(out.join(name), data).unwrap_or_else(|e| panic!("cannot write {name}: {e}"));
    }
}
