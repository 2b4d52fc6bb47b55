//! Who may import, from a door's list of process ids.

use hal_core::handle::wire::MAX_PIDS;
use hal_core::{Error, Importers, Result};

/// The importers `pids` names, refused ([`Error::InvalidArgument`]) when a
/// handle cannot carry that many; `count` is how the door's caller wrote
/// the count (`n_pids`, `importers`), for the message.
pub fn pids_importers(
    count: &str,
    pids: usize,
    read: impl FnOnce() -> Vec<u32>,
) -> Result<Importers> {
    if pids > MAX_PIDS {
        return Err(Error::invalid(format!(
            "{count} is {pids}, over the most a handle carries ({MAX_PIDS})"
        )));
    }
    Ok(Importers::Pids(read()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_a_handle_cannot_carry_is_refused_before_it_is_read() {
        let err = pids_importers("`n_pids`", MAX_PIDS + 1, || unreachable!()).unwrap_err();
        assert!(err.to_string().contains("`n_pids` is"), "{err}");
        let ok = pids_importers("`n_pids`", 2, || vec![7, 8]).unwrap();
        assert_eq!(ok, Importers::Pids(vec![7, 8]));
    }
}
