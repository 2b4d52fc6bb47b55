//! Which brokers an importer takes descriptors from: those of its own
//! user and root, and the users it was told to trust.
//!
//! Descriptors that arrive with `SCM_RIGHTS` are installed before anything
//! can look at them, and one of them (a FUSE file whose daemon never
//! answers) can keep the importer from exiting (RELIABILITY.md, "What is
//! not protected"). So by default an importer refuses a broker of another
//! user. A program that imports what another user exports to anyone (a
//! tool reading a PostgreSQL server's buffer, a root daemon's clients)
//! names that user: [`trust_exporter_uid`], or the environment variable
//! [`TRUST_ENV`] (a comma-separated list of uids, read once). The overflow
//! uid, which stands for every user another user namespace does not map,
//! is never trusted.

use std::sync::{Mutex, OnceLock};

use super::policy::{uid_allowed, unmapped};
use crate::kit::os::lock::lock;

/// The environment variable with the uids whose brokers this process
/// trusts besides its own and root's (`HAL_TRUST_EXPORTER_UIDS=26,1000`).
pub const TRUST_ENV: &str = "HAL_TRUST_EXPORTER_UIDS";

/// The uids trusted by [`trust_exporter_uid`].
static TRUSTED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// The uids [`TRUST_ENV`] names, read once; malformed entries are skipped
/// with a warning.
fn from_env() -> &'static [u32] {
    static UIDS: OnceLock<Vec<u32>> = OnceLock::new();
    UIDS.get_or_init(|| {
        let Ok(text) = std::env::var(TRUST_ENV) else {
            return Vec::new();
        };
        text.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .filter_map(|t| match t.parse() {
                Ok(uid) => Some(uid),
                Err(_) => {
                    log::warn!("{TRUST_ENV}: {t:?} is not a uid; ignored");
                    None
                }
            })
            .collect()
    })
}

/// Trust the brokers of user `uid` in this process from now on: imports of
/// handles whose exporter runs as `uid` take its descriptors (see the
/// module). Always true (the answer is kept for bindings that report it).
pub fn trust_exporter_uid(uid: u32) -> bool {
    let mut trusted = lock(&TRUSTED);
    if !trusted.contains(&uid) {
        trusted.push(uid);
    }
    true
}

/// Whether this process takes descriptors from a broker that runs as
/// `uid` (pid `pid`): its own user, root, or a user it trusts; never one
/// that stands for unmapped users ([`unmapped`]).
pub(super) fn broker_trusted(uid: u32, pid: u32) -> bool {
    uid_allowed(uid, pid)
        || (!unmapped(uid, pid) && (from_env().contains(&uid) || lock(&TRUSTED).contains(&uid)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trusted_uid_is_trusted_and_unmapped_users_never() {
        let me = nix::unistd::geteuid().as_raw();
        assert!(broker_trusted(me, 1) && broker_trusted(0, 1));
        let other = 0x7ead_0001;
        assert!(!broker_trusted(other, 1));
        assert!(trust_exporter_uid(other));
        assert!(broker_trusted(other, 1));
        let overflow = super::super::policy::overflow_uid();
        assert!(trust_exporter_uid(overflow));
        assert!(
            !broker_trusted(overflow, 0),
            "unmapped users are never trusted"
        );
    }
}
