//! Dense tables indexed by u32 (pages, frames, slots, processes) share one empty value.

/// "No page, frame, slot or owner": the empty value of every dense u32 index table.
pub const NONE: u32 = u32::MAX;
