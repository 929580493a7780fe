//! `c_enum!`: a Rust enum mirroring a C enum, converted by naming each C constant (`TryFrom`
//! for values from the library, never a panicking `From`; `From` back to the C value). With
//! `unknown Name`, the enum gets a `Name(raw)` variant and `from_c`, which keeps any value, for
//! attributes a getter returns as they are.

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident : $ty:ty { $($(#[$vm:meta])* $v:ident = $c:expr,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name { $($(#[$vm])* $v,)* }
        impl TryFrom<$ty> for $name {
            type Error = $ty;
            fn try_from(v: $ty) -> Result<Self, $ty> {
                $(if v == $c { return Ok(Self::$v); })*
                Err(v)
            }
        }
        impl From<$name> for $ty {
            fn from(v: $name) -> $ty {
                match v { $($name::$v => $c,)* }
            }
        }
    };
    ($(#[$m:meta])* $name:ident : $ty:ty, unknown $unk:ident { $($(#[$vm:meta])* $v:ident = $c:expr,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vm])* $v,)*
            /// A value this crate does not know (as the device reported it).
            $unk($ty),
        }
        impl $name {
            /// The named value, or the unknown variant holding `v`.
            #[allow(dead_code)]
            pub(crate) fn from_c(v: $ty) -> Self {
                Self::try_from(v).unwrap_or(Self::$unk(v))
            }
        }
        impl TryFrom<$ty> for $name {
            type Error = $ty;
            fn try_from(v: $ty) -> Result<Self, $ty> {
                $(if v == $c { return Ok(Self::$v); })*
                Err(v)
            }
        }
        impl From<$name> for $ty {
            fn from(v: $name) -> $ty {
                match v { $($name::$v => $c,)* $name::$unk(v) => v, }
            }
        }
    };
}
