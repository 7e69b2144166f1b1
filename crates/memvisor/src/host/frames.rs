//! The machine frame table: for every frame, free or its one owner.

use crate::index::NONE;

/// Who holds a machine frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameOwner {
    /// On the free list.
    Free,
    /// Backs page `.1` of VM `.0`.
    Guest(u32, u32),
    /// Overhead memory of VM `.0`.
    Overhead(u32),
}

/// The frame table.
#[derive(Clone, Debug)]
pub struct Frames {
    vm: Vec<u32>,
    ppn: Vec<u32>,
    free: Vec<u32>,
}

const OVERHEAD: u32 = NONE - 1;

impl Frames {
    /// `n` free frames; low frame numbers are handed out first.
    pub fn new(n: u32) -> Self {
        Self { vm: vec![NONE; n as usize], ppn: vec![NONE; n as usize], free: (0..n).rev().collect() }
    }

    /// Frames in all.
    pub fn total(&self) -> u64 {
        self.vm.len() as u64
    }

    /// Free frames.
    pub fn nr_free(&self) -> u64 {
        self.free.len() as u64
    }

    /// Takes a free frame for `owner`.
    pub fn take(&mut self, owner: FrameOwner) -> Option<u32> {
        let f = self.free.pop()?;
        let (vm, ppn) = match owner {
            FrameOwner::Guest(vm, ppn) => (vm, ppn),
            FrameOwner::Overhead(vm) => (vm, OVERHEAD),
            FrameOwner::Free => unreachable!("taking a frame for nobody"),
        };
        self.vm[f as usize] = vm;
        self.ppn[f as usize] = ppn;
        Some(f)
    }

    /// The owner of a frame.
    pub fn owner(&self, f: u32) -> FrameOwner {
        match (self.vm[f as usize], self.ppn[f as usize]) {
            (NONE, _) => FrameOwner::Free,
            (vm, OVERHEAD) => FrameOwner::Overhead(vm),
            (vm, ppn) => FrameOwner::Guest(vm, ppn),
        }
    }

    /// Checks that the free list holds exactly the unowned frames, each once.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = vec![false; self.vm.len()];
        for &f in &self.free {
            if seen[f as usize] {
                return Err(format!("frame {f} on the free list twice"));
            }
            seen[f as usize] = true;
            if self.vm[f as usize] != NONE {
                return Err(format!("frame {f} is on the free list but owned"));
            }
        }
        let unowned = self.vm.iter().filter(|&&v| v == NONE).count();
        if unowned != self.free.len() {
            return Err(format!("{unowned} unowned frames but {} on the free list", self.free.len()));
        }
        Ok(())
    }
}
