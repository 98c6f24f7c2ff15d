//! Enums whose values users type and read (`--precision amp-bf16`, `"severity": "warning"`): each
//! value's name is written once, beside the variant, and every parser, printer and serializer takes
//! it from there. The command line builds its value parsers from [`Named`] (clap stays in the
//! application layer), the reports print [`Named::name`], serde reads and writes the same text.

/// An enum of named values.
pub trait Named: Copy + Send + Sync + 'static {
    /// Every value, in declaration order.
    const ALL: &'static [Self];
    /// The name users type and read.
    fn name(self) -> &'static str;
    /// One line of help (the variant's doc comment).
    fn help(self) -> &'static str;

    /// The value with this name (exact match).
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.name() == name)
    }

    /// `a, b or c`, for messages.
    fn choices() -> String {
        let names: Vec<String> = Self::ALL
            .iter()
            .map(|v| format!("'{}'", v.name()))
            .collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.join(""),
        }
    }
}

/// Declares an enum of named values: `Display`, `FromStr`, serde and [`Named`] from one list.
///
/// ```ignore
/// named_enum! {
///     /// Numeric precision of training.
///     pub enum Precision {
///         /// Everything in fp32.
///         Fp32 = "fp32",
///         /// torch.autocast to bfloat16.
///         AmpBf16 = "amp-bf16",
///     }
/// }
/// ```
#[macro_export]
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[doc = $doc:literal])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[doc = $doc])* $variant, )+
        }

        impl $crate::util::names::Named for $name {
            const ALL: &'static [Self] = &[$($name::$variant),+];
            fn name(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
            fn help(self) -> &'static str {
                match self { $($name::$variant => concat!($($doc),*).trim_ascii()),+ }
            }
        }

        impl $name {
            /// The name users type and read.
            pub fn name(self) -> &'static str {
                <Self as $crate::util::names::Named>::name(self)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                use $crate::util::names::Named;
                Self::from_name(s).ok_or_else(|| {
                    format!("'{s}' is not one of {}", Self::choices())
                })
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(d)?;
                text.parse().map_err(::serde::de::Error::custom)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::Named;

    crate::named_enum! {
        /// A test enum.
        pub enum Colour {
            /// The colour of the sky.
            Blue = "blue",
            /// Grass.
            DarkGreen = "dark-green",
        }
    }

    #[test]
    fn names_parse_print_and_serialise_alike() {
        assert_eq!(Colour::DarkGreen.to_string(), "dark-green");
        assert_eq!("blue".parse::<Colour>(), Ok(Colour::Blue));
        assert_eq!(
            "red".parse::<Colour>().unwrap_err(),
            "'red' is not one of 'blue' or 'dark-green'"
        );
        assert_eq!(Colour::Blue.help(), "The colour of the sky.");
        assert_eq!(
            serde_json::to_string(&Colour::DarkGreen).unwrap(),
            "\"dark-green\""
        );
        let c: Colour = serde_json::from_str("\"blue\"").unwrap();
        assert_eq!(c, Colour::Blue);
        assert_eq!(Colour::ALL.len(), 2);
    }
}
