//! Size-class selection: the smallest class that holds a requested length.

use crate::{Error, Result};

/// Ascending class sizes of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SizeClasses {
    sizes: Box<[usize]>,
}

impl SizeClasses {
    /// Classes of these sizes; the caller has validated them (non-empty, strictly ascending).
    pub(crate) fn new(sizes: impl IntoIterator<Item = usize>) -> Self {
        let sizes: Box<[usize]> = sizes.into_iter().collect();
        debug_assert!(!sizes.is_empty() && sizes.windows(2).all(|w| w[0] < w[1]));
        Self { sizes }
    }

    /// Index of the smallest class of at least `len` bytes.
    pub(crate) fn select(&self, len: usize) -> Result<usize> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        let index = self.sizes.partition_point(|&size| size < len);
        if index == self.sizes.len() {
            return Err(Error::TooLarge {
                requested: len,
                max: self.max(),
            });
        }
        Ok(index)
    }

    /// Size of class `index`.
    pub(crate) fn size(&self, index: usize) -> usize {
        self.sizes[index]
    }

    /// The largest class size.
    pub(crate) fn max(&self) -> usize {
        self.sizes[self.sizes.len() - 1]
    }

    /// All sizes, ascending.
    pub(crate) fn sizes(&self) -> &[usize] {
        &self.sizes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_smallest_class_that_fits() {
        let classes = SizeClasses::new([64, 4096, 1 << 20]);
        assert_eq!(classes.select(1).unwrap(), 0);
        assert_eq!(classes.select(63).unwrap(), 0);
        assert_eq!(classes.select(64).unwrap(), 0);
        assert_eq!(classes.select(65).unwrap(), 1);
        assert_eq!(classes.select(4096).unwrap(), 1);
        assert_eq!(classes.select(4097).unwrap(), 2);
        assert_eq!(classes.select(1 << 20).unwrap(), 2);
    }

    #[test]
    fn zero_and_oversized_requests_are_typed_errors() {
        let classes = SizeClasses::new([64, 4096]);
        assert!(matches!(classes.select(0), Err(Error::ZeroLength)));
        match classes.select(4097) {
            Err(Error::TooLarge { requested, max }) => {
                assert_eq!((requested, max), (4097, 4096));
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(matches!(
            classes.select(usize::MAX),
            Err(Error::TooLarge { .. })
        ));
    }

    #[test]
    fn a_single_class_serves_everything_up_to_its_size() {
        let classes = SizeClasses::new([256]);
        assert_eq!(classes.select(1).unwrap(), 0);
        assert_eq!(classes.select(256).unwrap(), 0);
        assert_eq!(classes.max(), 256);
        assert_eq!(classes.sizes(), &[256]);
        assert_eq!(classes.size(0), 256);
    }
}
