//! A list that stores one element in place: most work requests have one SGE and one buffer,
//! and posting them should not allocate for the list.

#[derive(Debug, Default)]
pub(crate) enum Small<T> {
    #[default]
    Empty,
    One(T),
    Many(Vec<T>),
}

impl<T> Small<T> {
    pub(crate) fn push(&mut self, v: T) {
        *self = match std::mem::take(self) {
            Small::Empty => Small::One(v),
            Small::One(a) => Small::Many(vec![a, v]),
            Small::Many(mut all) => {
                all.push(v);
                Small::Many(all)
            }
        };
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        match self {
            Small::Empty => &[],
            Small::One(a) => std::slice::from_ref(a),
            Small::Many(all) => all,
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            Small::Empty => &mut [],
            Small::One(a) => std::slice::from_mut(a),
            Small::Many(all) => all,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Removes and returns the element at `i` (order of the rest kept).
    pub(crate) fn remove(&mut self, i: usize) -> T {
        match std::mem::take(self) {
            Small::Empty => panic!("remove from an empty list"),
            Small::One(a) => {
                assert_eq!(i, 0, "index out of range");
                a
            }
            Small::Many(mut all) => {
                let v = all.remove(i);
                *self = Small::Many(all);
                v
            }
        }
    }

    pub(crate) fn into_vec(self) -> Vec<T> {
        match self {
            Small::Empty => Vec::new(),
            Small::One(a) => vec![a],
            Small::Many(all) => all,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Small;

    #[test]
    fn keeps_order_through_growth_and_removal() {
        let mut s = Small::default();
        assert_eq!(s.len(), 0);
        s.push(1);
        assert!(matches!(s, Small::One(1)));
        s.push(2);
        s.push(3);
        assert_eq!(s.as_slice(), &[1, 2, 3]);
        assert_eq!(s.remove(1), 2);
        assert_eq!(s.as_mut_slice(), &mut [1, 3]);
        assert_eq!(s.into_vec(), vec![1, 3]);
        let mut one = Small::default();
        one.push(9);
        assert_eq!(one.remove(0), 9);
        assert_eq!(one.len(), 0);
    }
}
