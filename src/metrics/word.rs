//! Words a protocol declares for shared code to carry: a name and what it means, as a
//! value that is cheap to copy and equal to another when the names are. [`Phase`] and
//! [`ErrorKind`] are such words; there is no list of them in shared code.
//!
//! [`Phase`]: super::Phase
//! [`ErrorKind`]: super::ErrorKind

/// What a word is: its name (as results files write it) and what it means.
#[derive(Debug)]
pub struct Def {
    pub name: &'static str,
    pub what: &'static str,
}

/// Makes `$t` a word type over [`Def`].
macro_rules! word {
    ($(#[$m:meta])* $t:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy)]
        pub struct $t(&'static $crate::metrics::word::Def);

        impl $t {
            pub const fn new(def: &'static $crate::metrics::word::Def) -> $t {
                $t(def)
            }
            pub fn name(self) -> &'static str {
                self.0.name
            }
            /// What it means, in a line.
            pub fn describe(self) -> &'static str {
                self.0.what
            }
            /// The one of `words` named `name`.
            pub fn find(words: &[$t], name: &str) -> Option<$t> {
                words.iter().copied().find(|w| w.name() == name)
            }
            /// The word named `name` as a results directory names it: the same value as
            /// the declared word of that name. Each name is made once and kept for the
            /// life of the process; callers pass names a run wrote.
            pub fn named(name: &str) -> $t {
                use std::sync::Mutex;
                use $crate::metrics::word::Def;
                static NAMED: Mutex<Vec<&'static Def>> = Mutex::new(Vec::new());
                let mut named = NAMED.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(def) = named.iter().find(|d| d.name == name) {
                    return $t(def);
                }
                let def: &'static Def = Box::leak(Box::new(Def {
                    name: Box::leak(name.to_string().into_boxed_str()),
                    what: "",
                }));
                named.push(def);
                $t(def)
            }
        }

        impl PartialEq for $t {
            #[inline]
            fn eq(&self, other: &$t) -> bool {
                std::ptr::eq(self.0, other.0) || self.0.name == other.0.name
            }
        }
        impl Eq for $t {}
        impl std::hash::Hash for $t {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.0.name.hash(state);
            }
        }
        impl PartialOrd for $t {
            fn partial_cmp(&self, other: &$t) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for $t {
            fn cmp(&self, other: &$t) -> std::cmp::Ordering {
                self.0.name.cmp(other.0.name)
            }
        }
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
                Ok($t::named(&name))
            }
        }
    };
}
pub(crate) use word;

/// The words every protocol can have, as `$t`'s own constants:
/// `common! { Phase: CONNECT => "connect", "TCP connect"; }`.
macro_rules! common {
    ($t:ident: $($id:ident => $name:literal, $doc:literal;)*) => {
        impl $t {
            $(
                #[doc = $doc]
                pub const $id: $t = $t::new(&$crate::metrics::word::Def { name: $name, what: $doc });
            )*
        }
    };
}
pub(crate) use common;

/// Declares words of type `$t` as constants:
/// `declare! { Phase: pub EHLO => "ehlo", "EHLO to its reply"; }`.
macro_rules! declare {
    ($t:ident: $($vis:vis $id:ident => $name:literal, $doc:literal;)*) => {
        $(
            #[doc = $doc]
            $vis const $id: $crate::metrics::$t =
                $crate::metrics::$t::new(&$crate::metrics::word::Def { name: $name, what: $doc });
        )*
    };
}
pub(crate) use declare;
