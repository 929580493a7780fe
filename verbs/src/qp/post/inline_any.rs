//! [`InlineAny`]: a value of any small `Send + 'static` type stored in place, type-erased, so
//! posting another crate's buffer handle (a pool buffer, say) allocates nothing.

use std::any::{Any, TypeId};
use std::mem::{align_of, size_of, ManuallyDrop, MaybeUninit};

/// Words of storage: values up to 64 bytes with an alignment of at most 8 are stored in place.
const WORDS: usize = 8;

/// A type-erased value stored in place (like `Box<dyn Any + Send>` without the allocation).
/// What depends on the type besides its id sits in a static table, so the value with its
/// bookkeeping stays small (an in-flight entry holding one is moved on every post and
/// completion).
pub(crate) struct InlineAny {
    data: MaybeUninit<[u64; WORDS]>,
    type_id: TypeId,
    table: &'static Table,
}

/// The functions of one stored type.
struct Table {
    type_name: fn() -> &'static str,
    /// Drops the value in place.
    drop_value: unsafe fn(*mut u8),
    /// Moves the value out into a box.
    boxed: unsafe fn(*const u8) -> Box<dyn Any + Send>,
}

/// The table of `B`, a constant (so `&<B as Typed>::TABLE` is a `'static` borrow).
trait Typed {
    const TABLE: Table;
}

impl<B: Send + 'static> Typed for B {
    const TABLE: Table = Table {
        type_name: std::any::type_name::<B>,
        drop_value: drop_value::<B>,
        boxed: boxed::<B>,
    };
}

// SAFETY: only values of `Send` types are stored (`new` requires `B: Send`), so moving the
// storage to another thread moves a `Send` value. Nothing is shared through `&InlineAny`
// except the type's identity.
unsafe impl Send for InlineAny {}

/// # Safety
/// `p` points to an initialised `B` that is not used afterwards.
unsafe fn drop_value<B>(p: *mut u8) {
    // SAFETY: per the contract.
    unsafe { std::ptr::drop_in_place(p.cast::<B>()) }
}

/// # Safety
/// `p` points to an initialised `B`, which is moved out (not used or dropped afterwards).
unsafe fn boxed<B: Send + 'static>(p: *const u8) -> Box<dyn Any + Send> {
    // SAFETY: per the contract.
    Box::new(unsafe { p.cast::<B>().read() })
}

impl InlineAny {
    /// Stores `v` in place, or hands it back when it is too large or too strictly aligned.
    pub(crate) fn new<B: Send + 'static>(v: B) -> Result<InlineAny, B> {
        if size_of::<B>() > size_of::<[u64; WORDS]>() || align_of::<B>() > align_of::<u64>() {
            return Err(v);
        }
        let mut data = MaybeUninit::<[u64; WORDS]>::uninit();
        // SAFETY: the storage is large enough and aligned enough for a `B` (checked above), and
        // uninitialised storage may be written.
        unsafe { data.as_mut_ptr().cast::<B>().write(v) };
        Ok(InlineAny {
            data,
            type_id: TypeId::of::<B>(),
            table: &<B as Typed>::TABLE,
        })
    }

    /// Whether the value is a `B`.
    pub(crate) fn is<B: 'static>(&self) -> bool {
        self.type_id == TypeId::of::<B>()
    }

    /// The stored type's name.
    pub(crate) fn type_name(&self) -> &'static str {
        (self.table.type_name)()
    }

    /// The value as a `B`, or `self` back if it is another type.
    pub(crate) fn take<B: 'static>(self) -> Result<B, InlineAny> {
        if !self.is::<B>() {
            return Err(self);
        }
        let this = ManuallyDrop::new(self);
        // SAFETY: the storage holds an initialised `B` (type id checked); it is read once and
        // `ManuallyDrop` keeps `Drop` from dropping it again.
        Ok(unsafe { this.data.as_ptr().cast::<B>().read() })
    }

    /// The value, boxed.
    pub(crate) fn into_box(self) -> Box<dyn Any + Send> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `boxed` was made for the stored type; the value is moved out once and
        // `ManuallyDrop` keeps `Drop` from dropping it again.
        unsafe { (this.table.boxed)(this.data.as_ptr().cast::<u8>()) }
    }
}

impl Drop for InlineAny {
    fn drop(&mut self) {
        // SAFETY: the storage holds an initialised value of the type `drop_value` was made
        // for, and it is not used after this.
        unsafe { (self.table.drop_value)(self.data.as_mut_ptr().cast::<u8>()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Counted(Arc<AtomicUsize>, [u8; 40]);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn values_are_dropped_once_and_taken_by_type() {
        let drops = Arc::new(AtomicUsize::new(0));
        let v = InlineAny::new(Counted(drops.clone(), [7; 40]))
            .ok()
            .unwrap();
        assert!(v.is::<Counted>());
        let v = v.take::<u8>().err().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        let c = v.take::<Counted>().ok().unwrap();
        assert_eq!(c.1, [7; 40]);
        drop(c);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        drop(
            InlineAny::new(Counted(drops.clone(), [0; 40]))
                .ok()
                .unwrap(),
        );
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        let b = InlineAny::new(Counted(drops.clone(), [1; 40]))
            .ok()
            .unwrap()
            .into_box();
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        drop(b);
        assert_eq!(drops.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn large_or_overaligned_values_are_refused() {
        assert!(InlineAny::new([0u8; 65]).is_err());
        #[repr(align(16))]
        struct Wide(#[allow(dead_code)] u8);
        assert!(InlineAny::new(Wide(0)).is_err());
        assert!(InlineAny::new([0u8; 64]).is_ok());
    }

    #[test]
    fn the_stored_type_is_named_and_the_value_and_its_bookkeeping_stay_small() {
        let v = InlineAny::new(5u32).ok().unwrap();
        assert_eq!(v.type_name(), "u32");
        // The storage, the type's id and one pointer: an in-flight entry holding it stays
        // within what a move copies in place.
        assert!(size_of::<InlineAny>() <= size_of::<[u64; WORDS]>() + 24);
    }
}
