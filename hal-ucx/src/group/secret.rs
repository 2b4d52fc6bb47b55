//! The secret a group's members share: from the options, or from the
//! environment ([`SECRET_ENV`], 32 hex digits).

use hal_core::{Error, Result};

/// The environment variable that holds a group's secret, when the options
/// give none: 32 hex digits (16 bytes), the same in every member.
pub const SECRET_ENV: &str = "HAL_GROUP_SECRET";

/// The secret: `given`, or [`SECRET_ENV`]'s; an error saying how to set
/// one when there is none, or the variable's is not 32 hex digits.
pub(crate) fn resolve(given: Option<[u8; 16]>) -> Result<[u8; 16]> {
    if let Some(s) = given {
        return Ok(s);
    }
    let how = format!(
        "set {SECRET_ENV} to 32 hex digits, the same in every member (`openssl rand -hex 16` \
         makes one), or pass RemoteGroupOptions::secret"
    );
    match std::env::var(SECRET_ENV) {
        Ok(text) => parse(text.trim()).ok_or_else(|| Error::InvalidArgument {
            what: format!("{SECRET_ENV} is not 32 hex digits: {how}"),
        }),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::InvalidArgument {
            what: format!("{SECRET_ENV} is not text: {how}"),
        }),
        Err(std::env::VarError::NotPresent) => Err(Error::InvalidArgument {
            what: format!("a group across hosts needs the secret its members share: {how}"),
        }),
    }
}

/// The secret that `text`, 32 hex digits (as [`SECRET_ENV`] holds it,
/// surrounding blanks ignored), spells; [`Error::InvalidArgument`] naming
/// `what` (where the text came from) otherwise.
///
/// ```
/// let s = hal_ucx::group::parse_secret("000102030405060708090a0b0c0d0e0f", "the secret")?;
/// assert_eq!(s[15], 15);
/// assert!(hal_ucx::group::parse_secret("0001", "the secret").is_err());
/// # Ok::<(), hal_core::Error>(())
/// ```
pub fn parse_secret(text: &str, what: &str) -> Result<[u8; 16]> {
    parse(text.trim()).ok_or_else(|| Error::InvalidArgument {
        what: format!(
            "{what} is not 32 hex digits (16 bytes, the same in every member;              `openssl rand -hex 16` makes one)"
        ),
    })
}

/// The 16 bytes 32 hex digits spell.
pub(crate) fn parse(text: &str) -> Option<[u8; 16]> {
    let digits = text.as_bytes();
    if digits.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in digits.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_two_hex_digits_and_nothing_else() {
        let s = parse("000102030405060708090a0B0c0d0e0F").unwrap();
        assert_eq!(s, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
        assert!(parse("").is_none());
        assert!(parse("000102030405060708090a0b0c0d0e0").is_none());
        assert!(parse("000102030405060708090a0b0c0d0e0f0").is_none());
        assert!(parse("000102030405060708090a0b0c0d0e0g").is_none());
        assert!(parse("+00102030405060708090a0b0c0d0e0f").is_none());
        assert!(parse("é0102030405060708090a0b0c0d0e0f").is_none());
    }

    #[test]
    fn a_given_secret_is_taken_as_it_is() {
        assert_eq!(resolve(Some([9; 16])).unwrap(), [9; 16]);
    }
}
