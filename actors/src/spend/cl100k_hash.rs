// Shared by `actors/build.rs` (which lays out the table) and `spend::cl100k` (which probes it):
// both must hash a token's bytes the same way. Plain `std` only, so the build script can
// `include!` it.

/// Slots in the open-addressing table of cl100k's 100,256 tokens (load ≈ 0.38).
pub const TABLE_SLOTS: usize = 1 << 18;

/// FNV-1a (64-bit) of `bytes`, folded to the table's index width.
pub fn slot_of(bytes: &[u8]) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    ((h ^ (h >> 32)) as usize) & (TABLE_SLOTS - 1)
}
