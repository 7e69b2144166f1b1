//! A dense bitmap with the word-at-a-time scans the fast paths need.

/// A fixed-length, growable bitmap.
#[derive(Clone, Debug, Default)]
pub struct Bitmap {
    words: Vec<u64>,
    len: usize,
}

impl Bitmap {
    /// `len` clear bits.
    pub fn new(len: usize) -> Self {
        Self { words: vec![0; len.div_ceil(64)], len }
    }

    /// Number of bits.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the bitmap has no bits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Grows to `len` bits; new bits are clear.
    pub fn grow(&mut self, len: usize) {
        if len > self.len {
            self.len = len;
            self.words.resize(len.div_ceil(64), 0);
        }
    }

    /// Tests bit `i`.
    #[inline]
    pub fn get(&self, i: usize) -> bool {
        self.words[i >> 6] >> (i & 63) & 1 != 0
    }

    /// Sets bit `i`.
    #[inline]
    pub fn set(&mut self, i: usize) {
        self.words[i >> 6] |= 1 << (i & 63);
    }

    /// Clears bit `i`.
    #[inline]
    pub fn clear(&mut self, i: usize) {
        self.words[i >> 6] &= !(1 << (i & 63));
    }

    /// Sets or clears bit `i`.
    #[inline]
    pub fn assign(&mut self, i: usize, v: bool) {
        if v { self.set(i) } else { self.clear(i) }
    }

    /// Length of the run of set bits starting at `from`, looking at no more than `max` bits.
    #[inline]
    pub fn ones_from(&self, from: usize, max: usize) -> usize {
        let end = (from + max).min(self.len);
        let mut i = from;
        while i < end {
            let w = self.words[i >> 6] >> (i & 63);
            let avail = 64 - (i & 63);
            let run = (!w).trailing_zeros() as usize;
            if run < avail {
                return (i + run).min(end) - from;
            }
            i += avail;
        }
        end - from
    }

    /// Length of the run of clear bits starting at `from`, looking at no more than `max` bits (bits
    /// past the end count as clear).
    pub fn zeros_from(&self, from: usize, max: usize) -> usize {
        let end = (from + max).min(self.len);
        if from >= end {
            return max;
        }
        match (from..end).find(|&i| self.get(i)) {
            Some(i) => i - from,
            None => max,
        }
    }

    /// First clear bit in `from..to`.
    pub fn next_zero_in(&self, from: usize, to: usize) -> Option<usize> {
        let to = to.min(self.len);
        let mut i = from;
        while i < to {
            let w = !self.words[i >> 6] >> (i & 63);
            if w != 0 {
                let j = i + w.trailing_zeros() as usize;
                return (j < to).then_some(j);
            }
            i = (i | 63) + 1;
        }
        None
    }

    /// The set bits, in ascending order.
    pub fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let b = w.trailing_zeros() as usize;
                    w &= w - 1;
                    i * 64 + b
                })
            })
        })
    }

    /// Number of set bits.
    pub fn count_ones(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_zero_search() {
        let mut b = Bitmap::new(200);
        for i in 10..150 {
            b.set(i);
        }
        assert_eq!(b.ones().collect::<Vec<_>>(), (10..150).collect::<Vec<_>>());
        let mut sparse = Bitmap::new(300);
        for i in [0, 63, 64, 199, 299] {
            sparse.set(i);
        }
        assert_eq!(sparse.ones().collect::<Vec<_>>(), vec![0, 63, 64, 199, 299]);
        assert_eq!(b.ones_from(10, 1000), 140);
        assert_eq!(b.ones_from(10, 5), 5);
        assert_eq!(b.ones_from(9, 10), 0);
        assert_eq!(b.ones_from(140, 100), 10);
        assert_eq!(b.next_zero_in(10, 200), Some(150));
        assert_eq!(b.next_zero_in(10, 150), None);
        let mut full = Bitmap::new(70);
        for i in 0..70 {
            full.set(i);
        }
        assert_eq!(full.next_zero_in(3, 70), None);
        full.clear(1);
        assert_eq!(full.next_zero_in(0, 3), Some(1));
        assert_eq!(full.count_ones(), 69);
    }
}
