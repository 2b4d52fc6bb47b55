//! The process-wide tables of live objects.
//!
//! A pointer handed to C (`hal_device *`, `hal_memory *`, ...) is a token,
//! never dereferenced: the object's id (never reused while the process
//! lives) and its type, packed as `id << 5 | type`. Every entry point looks
//! the token up first, so a forged pointer, an object of another type, a
//! second release or a use after release is answered with a status instead
//! of undefined behaviour.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use crate::status::{hal_status, Failure};

/// The next object id, shared by every table so that tokens never repeat.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Bits of a token below the id: the object's type.
const TYPE_BITS: u32 = 5;

/// The types of object, as the low bits of their tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Device = 1,
    Memory = 2,
    Notify = 3,
    Event = 4,
    Group = 5,
    Publisher = 6,
    Subscriber = 7,
    Loan = 8,
    Sample = 9,
    RemoteNode = 10,
    RemoteExport = 11,
    RemoteMemory = 12,
    RemoteNotify = 13,
    RemoteGroup = 14,
    RemoteOffer = 15,
    RemoteSubscriber = 16,
    RemoteSample = 17,
}

impl Kind {
    fn c_name(self) -> &'static str {
        match self {
            Kind::Device => "hal_device",
            Kind::Memory => "hal_memory",
            Kind::Notify => "hal_notify",
            Kind::Event => "hal_event",
            Kind::Group => "hal_group",
            Kind::Publisher => "hal_publisher",
            Kind::Subscriber => "hal_subscriber",
            Kind::Loan => "hal_loan",
            Kind::Sample => "hal_sample",
            Kind::RemoteNode => "hal_remote_node",
            Kind::RemoteExport => "hal_remote_exported",
            Kind::RemoteMemory => "hal_remote_memory",
            Kind::RemoteNotify => "hal_remote_notify",
            Kind::RemoteGroup => "hal_remote_group",
            Kind::RemoteOffer => "hal_remote_offer",
            Kind::RemoteSubscriber => "hal_remote_subscriber",
            Kind::RemoteSample => "hal_remote_sample",
        }
    }

    fn from_bits(bits: usize) -> Option<Kind> {
        [
            Kind::Device,
            Kind::Memory,
            Kind::Notify,
            Kind::Event,
            Kind::Group,
            Kind::Publisher,
            Kind::Subscriber,
            Kind::Loan,
            Kind::Sample,
            Kind::RemoteNode,
            Kind::RemoteExport,
            Kind::RemoteMemory,
            Kind::RemoteNotify,
            Kind::RemoteGroup,
            Kind::RemoteOffer,
            Kind::RemoteSubscriber,
            Kind::RemoteSample,
        ]
        .into_iter()
        .find(|k| *k as usize == bits)
    }
}

/// The live objects of one type.
pub(crate) struct Table<T> {
    kind: Kind,
    live: LazyLock<Mutex<HashMap<u64, Arc<T>>>>,
}

impl<T> Table<T> {
    /// An empty table of objects of `kind`.
    pub(crate) const fn new(kind: Kind) -> Table<T> {
        Table {
            kind,
            live: LazyLock::new(|| Mutex::new(HashMap::new())),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<T>>> {
        // A panic while the lock was held cannot leave the map half-changed
        // (insert and remove are single steps): go on with it.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep `object` and answer its token.
    pub(crate) fn insert(&self, object: Arc<T>) -> usize {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, object);
        ((id as usize) << TYPE_BITS) | self.kind as usize
    }

    /// The id of `token`, or why it is none of this table's.
    fn id_of(&self, token: usize, argument: &str) -> Result<u64, Failure> {
        self.id_before(token, NEXT_ID.load(Ordering::Relaxed), argument)
    }

    /// [`Table::id_of`] when `issued` is the next id to be handed out: a
    /// token of this table's type whose id is 0 or `issued` or beyond was
    /// never handed out (a forged pointer, `HAL_ERR_INVALID_OBJECT`), not
    /// released.
    fn id_before(&self, token: usize, issued: u64, argument: &str) -> Result<u64, Failure> {
        if token == 0 {
            return Err(Failure::null(argument));
        }
        let id = (token >> TYPE_BITS) as u64;
        let kind = Kind::from_bits(token & ((1 << TYPE_BITS) - 1));
        match kind {
            Some(k) if id != 0 && id < issued && k == self.kind => Ok(id),
            Some(k) if id != 0 && id < issued => Err(Failure::new(
                hal_status::HAL_ERR_INVALID_OBJECT,
                format!(
                    "`{argument}` is a {}, not a {}",
                    k.c_name(),
                    self.kind.c_name()
                ),
            )),
            _ => Err(Failure::new(
                hal_status::HAL_ERR_INVALID_OBJECT,
                format!(
                    "`{argument}` ({token:#x}) is no {} this library handed out",
                    self.kind.c_name()
                ),
            )),
        }
    }

    fn released(&self, argument: &str) -> Failure {
        Failure::new(
            hal_status::HAL_ERR_DOUBLE_RELEASE,
            format!(
                "`{argument}`: this {} was released already",
                self.kind.c_name()
            ),
        )
    }

    /// The live object of `token`.
    pub(crate) fn get(&self, token: usize, argument: &str) -> Result<Arc<T>, Failure> {
        let id = self.id_of(token, argument)?;
        let found = self.lock().get(&id).cloned();
        found.ok_or_else(|| self.released(argument))
    }

    /// Take the object of `token` out of the table; it is dropped when the
    /// last reference to it goes (a DLPack tensor may hold one).
    pub(crate) fn remove(&self, token: usize, argument: &str) -> Result<Arc<T>, Failure> {
        let id = self.id_of(token, argument)?;
        let removed = self.lock().remove(&id);
        removed.ok_or_else(|| self.released(argument))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_before_use() {
        static NUMBERS: Table<u32> = Table::new(Kind::Memory);
        static OTHERS: Table<u32> = Table::new(Kind::Notify);
        let token = NUMBERS.insert(Arc::new(7));
        assert_eq!(*NUMBERS.get(token, "m").unwrap(), 7);
        let wrong = OTHERS.get(token, "n").unwrap_err();
        assert_eq!(wrong.status, hal_status::HAL_ERR_INVALID_OBJECT);
        assert!(wrong.message.contains("is a hal_memory, not a hal_notify"));
        let forged = NUMBERS.get(0xdead_beef_0000, "m").unwrap_err();
        assert_eq!(forged.status, hal_status::HAL_ERR_INVALID_OBJECT);
        assert_eq!(
            NUMBERS.get(0, "m").unwrap_err().status,
            hal_status::HAL_ERR_NULL_ARGUMENT
        );
        assert_eq!(*NUMBERS.remove(token, "m").unwrap(), 7);
        let again = NUMBERS.remove(token, "m").unwrap_err();
        assert_eq!(again.status, hal_status::HAL_ERR_DOUBLE_RELEASE);
        let after = NUMBERS.get(token, "m").unwrap_err();
        assert_eq!(after.status, hal_status::HAL_ERR_DOUBLE_RELEASE);
    }

    /// A token of `kind` for `id`, as [`Table::insert`] makes them.
    fn token(id: u64, kind: Kind) -> usize {
        ((id as usize) << TYPE_BITS) | kind as usize
    }

    /// Require that `token` is refused as a forged pointer (never handed
    /// out), not as a released object, when `issued` is the next id.
    #[track_caller]
    fn forged(table: &Table<u32>, token: usize, issued: u64) {
        let e = table.id_before(token, issued, "m").unwrap_err();
        assert_eq!(
            (e.status, e.message.as_str()),
            (
                hal_status::HAL_ERR_INVALID_OBJECT,
                format!("`m` ({token:#x}) is no hal_memory this library handed out").as_str()
            ),
            "token {token:#x}, next id {issued}"
        );
    }

    #[test]
    fn the_type_bits_and_the_next_id_are_forged() {
        static NUMBERS: Table<u32> = Table::new(Kind::Memory);
        let issued = 1000;
        forged(&NUMBERS, token(issued, Kind::Memory), issued);
        // The last id handed out is this table's (were it live).
        assert_eq!(
            NUMBERS.id_before(token(issued - 1, Kind::Memory), issued, "m"),
            Ok(issued - 1)
        );
    }

    #[test]
    fn the_type_bits_and_an_id_beyond_the_next_are_forged() {
        static NUMBERS: Table<u32> = Table::new(Kind::Memory);
        let issued = 1000;
        for id in [issued + 1, issued + 4096, (usize::MAX >> TYPE_BITS) as u64] {
            forged(&NUMBERS, token(id, Kind::Memory), issued);
        }
        // Nor is it an object of another type.
        forged(&NUMBERS, token(issued + 1, Kind::Notify), issued);
    }

    #[test]
    fn the_type_bits_and_id_0_are_forged() {
        static NUMBERS: Table<u32> = Table::new(Kind::Memory);
        forged(&NUMBERS, token(0, Kind::Memory), 1000);
        forged(&NUMBERS, token(0, Kind::Notify), 1000);
    }

    /// Through the table's own lookups, with the ids this process has
    /// handed out: a forged token whose type bits are right is an invalid
    /// object, whether its id is the next one, beyond it, or 0.
    #[test]
    fn get_and_remove_of_a_forged_token_are_invalid_objects() {
        static NUMBERS: Table<u32> = Table::new(Kind::Memory);
        let live = NUMBERS.insert(Arc::new(7));
        let far = (usize::MAX >> TYPE_BITS) as u64;
        for t in [token(0, Kind::Memory), token(far, Kind::Memory)] {
            for e in [
                NUMBERS.get(t, "m").unwrap_err(),
                NUMBERS.remove(t, "m").unwrap_err(),
            ] {
                assert_eq!(e.status, hal_status::HAL_ERR_INVALID_OBJECT, "{t:#x}");
            }
        }
        assert_eq!(*NUMBERS.remove(live, "m").unwrap(), 7);
    }
}
