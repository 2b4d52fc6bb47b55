//! The table of UCP's entry points, resolved once when the library is
//! loaded, each by its name and with its signature as `ucp/api/ucp.h`
//! declares it (`bindings::fns`). A missing one is [`Error::Unsupported`]
//! naming the symbol and the library when it is called, never a panic.

use std::path::PathBuf;
use std::sync::OnceLock;

use hal_core::kit::os::library::{Loaded, NotLoaded};
use hal_core::{BackendId, Error, Result};

use super::bindings::{self, fns};
use super::loader;

/// The id of UCX in errors. UCX is a transport, not a device: it has no
/// wire id, but its errors name it the way a backend's name the vendor.
/// The id lies below the external range, so no handle can carry it (the
/// decoder and the encoder refuse it), and it is named `ucx` for messages.
const UCX_ID: u16 = 0x7fff;

/// The backend errors of UCX name: `UCX_ID`, named `ucx`.
pub(crate) fn ucx_id() -> BackendId {
    static NAMED: std::sync::Once = std::sync::Once::new();
    NAMED.call_once(|| {
        if let Err(e) = BackendId::name_external(UCX_ID, "ucx") {
            log::warn!("naming UCX in errors: {e}");
        }
    });
    BackendId::External(UCX_ID)
}

macro_rules! entries {
    ($( $sym:ident ),* $(,)?) => {
        /// The entry points, each `None` where the library lacks it.
        #[allow(non_snake_case)]
        pub(crate) struct Table {
            $( $sym: Option<fns::$sym>, )*
        }

        impl Table {
            /// Resolve every entry point from `loaded`.
            fn resolve(loaded: &Loaded) -> Table {
                Table {
                    $(
                        // SAFETY: the symbol is UCP's entry point of this
                        // name, and `fns::$sym` is its C signature as
                        // `ucp/api/ucp.h` declares it; the library is never
                        // unloaded, so the copy stays valid.
                        $sym: unsafe { loaded.symbol::<fns::$sym>(stringify!($sym)) },
                    )*
                }
            }
        }

        impl Ucx {
            $(
                #[doc = concat!("`", stringify!($sym), "`.")]
                #[allow(non_snake_case)]
                pub(crate) fn $sym(&self) -> Result<fns::$sym> {
                    self.table.$sym.ok_or_else(|| self.missing(stringify!($sym)))
                }
            )*
        }
    };
}

entries!(
    ucp_get_version,
    ucp_config_read,
    ucp_config_release,
    ucp_config_modify,
    ucp_init_version,
    ucp_cleanup,
    ucp_context_query,
    ucp_worker_create,
    ucp_worker_destroy,
    ucp_worker_progress,
    ucp_worker_get_efd,
    ucp_worker_arm,
    ucp_worker_signal,
    ucp_listener_create,
    ucp_listener_destroy,
    ucp_listener_query,
    ucp_listener_reject,
    ucp_conn_request_query,
    ucp_ep_create,
    ucp_ep_close_nbx,
    ucp_mem_map,
    ucp_mem_unmap,
    ucp_am_send_nbx,
    ucp_am_recv_data_nbx,
    ucp_am_data_release,
    ucp_worker_set_am_recv_handler,
    ucp_request_free,
    ucs_status_string,
);

/// The loaded library and its entry points.
pub(crate) struct Ucx {
    loaded: Loaded,
    table: Table,
    /// The library's version: major, minor, release.
    pub(crate) version: (u32, u32, u32),
}

impl Ucx {
    /// Where the library was loaded from.
    pub(crate) fn path(&self) -> &PathBuf {
        &self.loaded.path
    }

    /// The refusal of a call of `symbol`, which the library lacks.
    fn missing(&self, symbol: &str) -> Error {
        Error::unsupported(
            ucx_id(),
            symbol,
            format!(
                "{} has no entry point {symbol}: it is older than the UCX {}.{} whose header \
                 hal-ucx was built from (install a newer UCX, or point {} at one)",
                self.loaded.path.display(),
                bindings::UCP_API_MAJOR,
                bindings::UCP_API_MINOR,
                loader::LIBRARY_VAR
            ),
        )
    }
}

/// Why UCX cannot be used in this process.
fn unavailable(reason: String, searched: Vec<PathBuf>) -> Error {
    Error::Unavailable {
        backend: ucx_id(),
        reason,
        searched,
    }
}

/// Load the library the search finds, and check its version: the same
/// major version as the header, and no older a minor one (the parameter
/// structures and `_nbx` calls the bindings use).
fn load() -> Result<Ucx> {
    let (named, candidates) = loader::search(None);
    // SAFETY: the candidates are UCX's UCP library by name, or the one the
    // user named in HAL_UCX_LIBRARY; its initialisers have no
    // preconditions on this process.
    let loaded = unsafe { loader::LIBRARY.load(named, candidates) }
        .map_err(|e: NotLoaded| unavailable(e.reason(), e.searched()))?;
    let table = Table::resolve(&loaded);
    let mut ucx = Ucx {
        loaded,
        table,
        version: (0, 0, 0),
    };
    let get_version = ucx.ucp_get_version()?;
    let (mut major, mut minor, mut release) = (0u32, 0u32, 0u32);
    // SAFETY: the three pointers are to live locals the call writes.
    unsafe { get_version(&mut major, &mut minor, &mut release) };
    ucx.version = (major, minor, release);
    let (want_major, want_minor) = (bindings::UCP_API_MAJOR, bindings::UCP_API_MINOR);
    if major != want_major || minor < want_minor {
        return Err(Error::unsupported(
            ucx_id(),
            "ucp_init",
            format!(
                "{} is UCX {major}.{minor}.{release}; hal-ucx needs UCX {want_major}.x from \
                 {want_major}.{want_minor} on (the version of the header it was built from): \
                 install a newer UCX or point {} at one",
                ucx.path().display(),
                loader::LIBRARY_VAR
            ),
        ));
    }
    Ok(ucx)
}

/// Why the library was not loaded, kept: the reason, the paths tried,
/// and whether it was found but refused (true) rather than not found.
type Refusal = (String, Vec<PathBuf>, bool);

/// The process's UCP library, loaded on first use. The answer is kept,
/// failure included: `HAL_UCX_LIBRARY` is read once.
pub(crate) fn ucx() -> Result<&'static Ucx> {
    static UCX_LIB: OnceLock<std::result::Result<Ucx, Refusal>> = OnceLock::new();
    let kept = UCX_LIB.get_or_init(|| {
        load().map_err(|e| match e {
            Error::Unavailable {
                reason, searched, ..
            } => (reason, searched, false),
            other => (other.to_string(), Vec::new(), true),
        })
    });
    match kept {
        Ok(u) => Ok(u),
        Err((reason, searched, false)) => Err(unavailable(reason.clone(), searched.clone())),
        Err((reason, _, true)) => Err(Error::unsupported(ucx_id(), "ucp_init", reason.clone())),
    }
}
