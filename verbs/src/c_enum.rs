//! `c_enum!`: a Rust enum mirroring a C enum, converted by naming each C constant (`TryFrom`
//! for values from the library, never a panicking `From`; `From` back to the C value).

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
}
