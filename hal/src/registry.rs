//! The registry: which backends are compiled in, which of them are usable on
//! this machine (and why not), opening one by name, and picking the best.
//!
//! Every backend compiled in (one Cargo feature each) has a registry name:
//!
//! | name | feature | what |
//! |---|---|---|
//! | `cuda` | `cuda` | CUDA device memory through the driver API (`hal-cuda`) |
//! | `cuda-uvm` | `cuda-uvm` | CUDA managed memory shared across processes (`hal-cuda-uvm`) |
//! | `ascend` | `ascend` | Huawei Ascend NPUs through the ACL runtime (`hal-ascend`) |
//! | `cpu-shm` | `cpu-shm` (default) | CPU shared memory |
//! | `mock-cuda` (alias `mock`) | `mock` | the simulator's CUDA-like devices |
//! | `mock-ascend` | `mock` | the simulator's Ascend-like devices |
//!
//! The table is also the preference order of [`Registry::best`]: hardware
//! backends first, then CPU shared memory, and a simulator only when nothing
//! else is usable.
//!
//! A backend of another crate (a vendor's, out of tree) joins at run time
//! with [`register`]: a name, an external id of `0x8000..=0xFFFF`
//! ([`BackendId::External`]) and a function that makes the backend. From
//! then on every registry of the process lists it (after the backends
//! above, in the order of registration), opens it by name, picks it for its
//! handles ([`Registry::for_handle`]) and messages call its id by its name.
//! The feature `template` registers the template backend
//! (`examples/template-backend`) as `template` this way.
//! docs/adding-a-backend.md has the id policy.
//!
//! ```
//! use hal::dynamic::DynBackend;
//!
//! fn open_mine() -> hal::Result<Box<dyn DynBackend>> {
//!     // A vendor crate's backend; the CPU backend stands in for one here.
//!     # #[cfg(feature = "cpu-shm")]
//!     # return Ok(Box::new(hal::cpu_shm::CpuShm::new()));
//!     # #[cfg(not(feature = "cpu-shm"))]
//!     # Err(hal::Error::invalid("no backend"))
//! }
//! hal::registry::register("doc-vendor", 0xfd01, open_mine)?;
//! assert!(hal::Registry::new().entries().iter().any(|e| e.name == "doc-vendor"));
//! assert_eq!(hal::BackendId::External(0xfd01).to_string(), "doc-vendor");
//! // Another id under the same name, or the name of a backend of hal, is refused.
//! assert!(hal::registry::register("doc-vendor", 0xfd02, open_mine).is_err());
//! assert!(hal::registry::register("cpu-shm", 0xfd03, open_mine).is_err());
//! # Ok::<(), hal::Error>(())
//! ```
//!
//! A backend is constructed and probed the first time the registry is asked
//! about it, once per [`Registry`]. Probing never panics: a backend that
//! fails to construct (or panics while doing so) is listed as unavailable
//! with the reason.
//!
//! ```
//! let registry = hal::Registry::new();
//! for entry in registry.entries() {
//!     match &entry.availability {
//!         hal::Availability::Available => println!("{}: available", entry.name),
//!         hal::Availability::Unavailable { reason, .. } => {
//!             println!("{}: unavailable: {reason}", entry.name)
//!         }
//!     }
//! }
//! # #[cfg(feature = "cpu-shm")]
//! assert_eq!(registry.best()?.name(), "cpu-shm");
//! # Ok::<(), hal::Error>(())
//! ```

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use hal_core::dynamic::{DynBackend, DynDevice};
use hal_core::{Availability, BackendId, DeviceInfo, Error, Handle, Result};

/// One backend the registry knows, as [`Registry::entries`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendEntry {
    /// The registry name (`cpu-shm`, `mock-cuda`, ...).
    pub name: String,
    /// Which backend.
    pub id: BackendId,
    /// Whether it can be used on this machine, and why not.
    pub availability: Availability,
}

type Constructor = fn() -> Result<Box<dyn DynBackend>>;

/// What makes a backend registered at run time ([`register`]).
pub type Opener = Arc<dyn Fn() -> Result<Box<dyn DynBackend>> + Send + Sync>;

/// A backend name the registry recognises, compiled in or not.
struct Known {
    name: &'static str,
    id: BackendId,
    feature: &'static str,
    make: Option<Constructor>,
}

/// Every backend name, in preference order, with its constructor where the
/// backend is compiled in.
const KNOWN: &[Known] = &[
    Known {
        name: "cuda",
        id: BackendId::Cuda,
        feature: "cuda",
        make: constructors::CUDA,
    },
    Known {
        name: "cuda-uvm",
        id: BackendId::CudaUvm,
        feature: "cuda-uvm",
        make: constructors::CUDA_UVM,
    },
    Known {
        name: "ascend",
        id: BackendId::Ascend,
        feature: "ascend",
        make: constructors::ASCEND,
    },
    Known {
        name: "cpu-shm",
        id: BackendId::CpuShm,
        feature: "cpu-shm",
        make: constructors::CPU_SHM,
    },
    Known {
        name: "mock-cuda",
        id: BackendId::MockCuda,
        feature: "mock",
        make: constructors::MOCK_CUDA,
    },
    Known {
        name: "mock-ascend",
        id: BackendId::MockAscend,
        feature: "mock",
        make: constructors::MOCK_ASCEND,
    },
];

/// Other spellings of registry names.
const ALIASES: &[(&str, &str)] = &[("mock", "mock-cuda")];

mod constructors {
    use super::Constructor;
    #[cfg(any(
        feature = "cpu-shm",
        feature = "mock",
        feature = "cuda",
        feature = "cuda-uvm",
        feature = "ascend"
    ))]
    use hal_core::dynamic::DynBackend;
    #[cfg(any(
        feature = "cpu-shm",
        feature = "mock",
        feature = "cuda",
        feature = "cuda-uvm",
        feature = "ascend"
    ))]
    use hal_core::Result;

    #[cfg(feature = "cuda")]
    pub(super) const CUDA: Option<Constructor> = Some(cuda);
    #[cfg(not(feature = "cuda"))]
    pub(super) const CUDA: Option<Constructor> = None;

    #[cfg(feature = "cuda")]
    fn cuda() -> Result<Box<dyn DynBackend>> {
        Ok(Box::new(hal_cuda::CudaBackend::new()))
    }

    #[cfg(feature = "cuda-uvm")]
    pub(super) const CUDA_UVM: Option<Constructor> = Some(cuda_uvm);
    #[cfg(not(feature = "cuda-uvm"))]
    pub(super) const CUDA_UVM: Option<Constructor> = None;

    #[cfg(feature = "cuda-uvm")]
    fn cuda_uvm() -> Result<Box<dyn DynBackend>> {
        Ok(Box::new(hal_cuda_uvm::UvmBackend::new()))
    }

    #[cfg(feature = "ascend")]
    pub(super) const ASCEND: Option<Constructor> = Some(ascend);
    #[cfg(not(feature = "ascend"))]
    pub(super) const ASCEND: Option<Constructor> = None;

    #[cfg(feature = "ascend")]
    fn ascend() -> Result<Box<dyn DynBackend>> {
        Ok(Box::new(hal_ascend::AscendBackend::new()))
    }

    #[cfg(feature = "cpu-shm")]
    pub(super) const CPU_SHM: Option<Constructor> = Some(cpu_shm);
    #[cfg(not(feature = "cpu-shm"))]
    pub(super) const CPU_SHM: Option<Constructor> = None;

    #[cfg(feature = "mock")]
    pub(super) const MOCK_CUDA: Option<Constructor> = Some(mock_cuda);
    #[cfg(not(feature = "mock"))]
    pub(super) const MOCK_CUDA: Option<Constructor> = None;

    #[cfg(feature = "mock")]
    pub(super) const MOCK_ASCEND: Option<Constructor> = Some(mock_ascend);
    #[cfg(not(feature = "mock"))]
    pub(super) const MOCK_ASCEND: Option<Constructor> = None;

    #[cfg(feature = "cpu-shm")]
    fn cpu_shm() -> Result<Box<dyn DynBackend>> {
        Ok(Box::new(hal_cpu_shm::CpuShm::new()))
    }

    #[cfg(feature = "mock")]
    fn mock_cuda() -> Result<Box<dyn DynBackend>> {
        let profile = hal_mock::Profile::cuda().with_env_overrides()?;
        Ok(Box::new(hal_mock::MockBackend::new(profile)))
    }

    #[cfg(feature = "mock")]
    fn mock_ascend() -> Result<Box<dyn DynBackend>> {
        let profile = hal_mock::Profile::ascend().with_env_overrides()?;
        Ok(Box::new(hal_mock::MockBackend::new(profile)))
    }
}

/// Register the backends of other crates that features of this crate link
/// in (`template`: the template backend as `template`), as a vendor's crate
/// registers its own. [`Registry::new`] calls it; a program that prints
/// handles before it makes a registry calls it first so that their
/// backends are named. A name or id another registration took first is
/// logged and left to that one.
pub fn register_linked() {
    #[cfg(feature = "template")]
    if let Err(e) = register_template() {
        log::warn!("the template backend is not registered: {e}");
    }
}

/// Register the template backend (`examples/template-backend`) as
/// `template`, as any crate of a vendor would register its own.
#[cfg(feature = "template")]
fn register_template() -> Result<()> {
    register(hal_template_backend::NAME, hal_template_backend::ID, || {
        Ok(Box::new(hal_template_backend::TemplateBackend::new()))
    })
}

/// The names of the backends compiled into this build, in preference order:
/// hal's own, then those of other crates its features link in (`template`),
/// which [`Registry::new`] registers.
pub fn compiled_in() -> &'static [&'static str] {
    const NAMES: &[&str] = &[
        #[cfg(feature = "cuda")]
        "cuda",
        #[cfg(feature = "cuda-uvm")]
        "cuda-uvm",
        #[cfg(feature = "ascend")]
        "ascend",
        #[cfg(feature = "cpu-shm")]
        "cpu-shm",
        #[cfg(feature = "mock")]
        "mock-cuda",
        #[cfg(feature = "mock")]
        "mock-ascend",
        #[cfg(feature = "template")]
        "template",
    ];
    NAMES
}

/// A backend as probed: constructed, or the reason it could not be.
enum Probed {
    Ready(Arc<dyn DynBackend>),
    Failed {
        reason: String,
        searched: Vec<PathBuf>,
    },
}

struct Slot {
    name: String,
    id: BackendId,
    make: Opener,
    probed: OnceLock<Probed>,
}

impl Slot {
    fn new(name: &str, id: BackendId, make: Opener) -> Arc<Slot> {
        Arc::new(Slot {
            name: name.to_string(),
            id,
            make,
            probed: OnceLock::new(),
        })
    }

    fn probed(&self) -> &Probed {
        self.probed.get_or_init(|| probe(self.id, &*self.make))
    }

    fn availability(&self) -> Availability {
        match self.probed() {
            Probed::Ready(backend) => guarded(self.id, "availability", || backend.availability())
                .unwrap_or_else(|e| unavailable_from(&e)),
            Probed::Failed { reason, searched } => Availability::Unavailable {
                reason: reason.clone(),
                searched: searched.clone(),
            },
        }
    }
}

/// A backend registered at run time.
struct Registered {
    name: String,
    id: u16,
    make: Opener,
}

/// The backends registered at run time, in the order of registration.
static REGISTERED: RwLock<Vec<Registered>> = RwLock::new(Vec::new());

fn registered() -> std::sync::RwLockReadGuard<'static, Vec<Registered>> {
    REGISTERED.read().unwrap_or_else(|p| p.into_inner())
}

/// Register a backend of another crate under `name` and the external id
/// `id`, for every registry of this process, present and future.
///
/// `id` is one of `0x8000..=0xFFFF` ([`BackendId::External`]; see
/// docs/adding-a-backend.md for how to pick one) and `name` 1 to 32
/// characters of `a-z`, `0-9` and `-`, starting with a letter
/// ([`hal_core::naming::check_external_name`]); both
/// [`Error::InvalidArgument`] otherwise. A name of one of hal's backends
/// (compiled in or not, aliases included), a name registered with another
/// id, or an id registered under another name is refused with
/// [`Error::AlreadyExists`] naming the holder. Registering the same name
/// and id again is no error and changes nothing (the first `open` stays).
///
/// `open` makes the backend; a registry calls it the first time it lists or
/// opens the backend (once per registry), and in a child process too, which
/// makes a registry of its own. An error or a panic there lists the backend
/// as unavailable with the reason, as for hal's own backends.
pub fn register<F>(name: &str, id: u16, open: F) -> Result<()>
where
    F: Fn() -> Result<Box<dyn DynBackend>> + Send + Sync + 'static,
{
    let name = name.trim();
    if canonical(name).is_some() || ALIASES.iter().any(|(alias, _)| *alias == name) {
        return Err(Error::AlreadyExists {
            what: format!(
                "backend name `{name}`: hal has a backend of that name; choose another name"
            ),
        });
    }
    let mut list = REGISTERED.write().unwrap_or_else(|p| p.into_inner());
    hal_core::naming::claim_external_name(id, name)?;
    if !list.iter().any(|r| r.name == name) {
        list.push(Registered {
            name: name.to_string(),
            id,
            make: Arc::new(open),
        });
    }
    Ok(())
}

/// The names of the backends registered at run time, in the order of
/// registration.
pub fn registered_names() -> Vec<String> {
    registered().iter().map(|r| r.name.clone()).collect()
}

/// Run `f`, turning a panic into an error.
fn guarded<T>(id: BackendId, what: &str, f: impl FnOnce() -> T) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        Error::Unavailable {
            backend: id,
            reason: format!("the backend panicked in {what}: {msg}"),
            searched: Vec::new(),
        }
    })
}

fn unavailable_from(error: &Error) -> Availability {
    match error {
        Error::Unavailable {
            reason, searched, ..
        } => Availability::Unavailable {
            reason: reason.clone(),
            searched: searched.clone(),
        },
        other => Availability::Unavailable {
            reason: other.to_string(),
            searched: Vec::new(),
        },
    }
}

fn probe(id: BackendId, make: &dyn Fn() -> Result<Box<dyn DynBackend>>) -> Probed {
    match guarded(id, "construction", make).and_then(|r| r) {
        Ok(backend) => Probed::Ready(Arc::from(backend)),
        Err(e) => match unavailable_from(&e) {
            Availability::Unavailable { reason, searched } => Probed::Failed { reason, searched },
            Availability::Available => Probed::Failed {
                reason: e.to_string(),
                searched: Vec::new(),
            },
        },
    }
}

/// A backend the registry holds, handed out as a box.
struct Shared(Arc<dyn DynBackend>);

impl DynBackend for Shared {
    fn id(&self) -> BackendId {
        self.0.id()
    }
    fn name(&self) -> String {
        self.0.name()
    }
    fn availability(&self) -> Availability {
        self.0.availability()
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        self.0.devices()
    }
    fn open(&self, ordinal: u32) -> Result<Box<dyn DynDevice>> {
        self.0.open(ordinal)
    }
}

/// The backends compiled into this build, probed on first use.
///
/// Cheap to create; each backend is constructed once per registry, the first
/// time it is listed or opened, and the boxes [`Registry::open`] hands out
/// share that one instance.
///
/// Its backends are its process's: in a child forked after a backend was
/// probed, that backend answers [`Error::Forked`] (a vendor context does
/// not survive `fork`). A child makes a registry of its own.
pub struct Registry {
    /// hal's own backends compiled in, then those registered at run time
    /// (added as they are registered).
    slots: Mutex<Vec<Arc<Slot>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("compiled_in", &compiled_in())
            .finish()
    }
}

/// The canonical name for `name`: lower case, `_` read as `-`, aliases resolved.
fn canonical(name: &str) -> Option<&'static Known> {
    let name = name.trim().to_ascii_lowercase().replace('_', "-");
    let name = ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name.as_str(), |(_, target)| target);
    KNOWN.iter().find(|k| k.name == name)
}

fn known_list() -> String {
    let mut names: Vec<String> = compiled_in().iter().map(|n| n.to_string()).collect();
    for name in registered_names() {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        return "none (enable a backend feature of the hal crate: cpu-shm, mock, or register \
                one with hal::registry::register)"
            .into();
    }
    let mut list = names.join(", ");
    for (alias, target) in ALIASES {
        if names.iter().any(|n| n == target) {
            list.push_str(&format!("; `{alias}` for {target}"));
        }
    }
    list
}

impl Registry {
    /// A registry of every backend compiled in and every backend
    /// registered at run time ([`register`]). Nothing is probed yet.
    pub fn new() -> Registry {
        register_linked();
        let slots = KNOWN
            .iter()
            .filter_map(|known| {
                known.make.map(|make| {
                    let make: Opener = Arc::new(make);
                    Slot::new(known.name, known.id, make)
                })
            })
            .collect();
        Registry {
            slots: Mutex::new(slots),
        }
    }

    /// Every slot: hal's own, then the registered ones, the slots of
    /// backends registered since the last call added.
    fn slots(&self) -> Vec<Arc<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        for r in registered().iter() {
            if !slots.iter().any(|s| s.name == r.name) {
                let id = BackendId::External(r.id);
                slots.push(Slot::new(&r.name, id, Arc::clone(&r.make)));
            }
        }
        slots.clone()
    }

    /// Every backend compiled in, then every backend registered, in
    /// preference order, with its availability on this machine.
    pub fn entries(&self) -> Vec<BackendEntry> {
        self.slots()
            .iter()
            .map(|slot| BackendEntry {
                name: slot.name.clone(),
                id: slot.id,
                availability: slot.availability(),
            })
            .collect()
    }

    fn slot(&self, name: &str) -> Result<Arc<Slot>> {
        let wanted = name.trim().to_ascii_lowercase().replace('_', "-");
        let Some(known) = canonical(name) else {
            return self
                .slots()
                .into_iter()
                .find(|s| s.name == wanted)
                .ok_or_else(|| Error::NotFound {
                    what: format!(
                        "backend `{name}`; the backends compiled in or registered are: {}",
                        known_list()
                    ),
                });
        };
        self.slots()
            .into_iter()
            .find(|s| s.name == known.name)
            .ok_or_else(|| Error::NotFound {
                what: format!(
                    "backend `{}`: not compiled into this build (it needs the Cargo feature \
                     `{}` of the hal crate); the backends compiled in are: {}",
                    known.name,
                    known.feature,
                    known_list()
                ),
            })
    }

    /// Open the backend called `name` (`mock` is an alias of `mock-cuda`).
    ///
    /// An unknown name, or one not compiled in, is [`Error::NotFound`]
    /// naming the backends compiled in; a backend that is not usable on this
    /// machine is [`Error::Unavailable`] with the reason.
    pub fn open(&self, name: &str) -> Result<Box<dyn DynBackend>> {
        let slot = self.slot(name)?;
        match slot.availability() {
            Availability::Available => {}
            Availability::Unavailable { reason, searched } => {
                return Err(Error::Unavailable {
                    backend: slot.id,
                    reason,
                    searched,
                })
            }
        }
        match slot.probed() {
            Probed::Ready(backend) => Ok(Box::new(Shared(Arc::clone(backend)))),
            Probed::Failed { reason, searched } => Err(Error::Unavailable {
                backend: slot.id,
                reason: reason.clone(),
                searched: searched.clone(),
            }),
        }
    }

    /// The first usable backend in the preference order: hardware backends
    /// first, then `cpu-shm`, a simulator only when nothing else is usable,
    /// then the backends registered at run time. With no backend compiled in
    /// or registered, [`Error::NotFound`].
    pub fn best(&self) -> Result<Box<dyn DynBackend>> {
        let slots = self.slots();
        if slots.is_empty() {
            return Err(Error::NotFound {
                what: format!("a usable backend: none is compiled in: {}", known_list()),
            });
        }
        let names: Vec<&str> = KNOWN
            .iter()
            .map(|k| k.name)
            .chain(
                slots
                    .iter()
                    .filter(|s| canonical(&s.name).is_none())
                    .map(|s| s.name.as_str()),
            )
            .collect();
        self.best_of(&names)
    }

    /// The first usable backend of `prefs`, in their order.
    ///
    /// Names of backends not compiled in are passed over; a name that is no
    /// backend at all is [`Error::NotFound`] (a typo should not silently fall
    /// through to another backend). When none is usable the error is
    /// [`Error::Unavailable`] with every backend's reason.
    pub fn best_of(&self, prefs: &[&str]) -> Result<Box<dyn DynBackend>> {
        if prefs.is_empty() {
            return Err(Error::invalid(
                "the preference list is empty: name at least one backend",
            ));
        }
        let others = registered_names();
        let known = |p: &str| {
            let p = p.trim().to_ascii_lowercase().replace('_', "-");
            canonical(&p).is_some() || others.contains(&p)
        };
        if let Some(bad) = prefs.iter().find(|p| !known(p)) {
            return Err(Error::NotFound {
                what: format!(
                    "backend `{bad}` in the preference list; the backends compiled in are: {}",
                    known_list()
                ),
            });
        }
        let mut why = Vec::new();
        for pref in prefs {
            match self.open(pref) {
                Ok(backend) => return Ok(backend),
                Err(Error::NotFound { .. }) => why.push(format!("{pref}: not compiled in")),
                Err(Error::Unavailable { reason, .. }) => why.push(format!("{pref}: {reason}")),
                Err(other) => why.push(format!("{pref}: {other}")),
            }
        }
        // Named by the first preference, the one most wanted; the reason
        // tells every preference's.
        let first = canonical(prefs[0]).map_or(BackendId::CpuShm, |k| k.id);
        Err(Error::Unavailable {
            backend: first,
            reason: format!(
                "none of the preferences {} is usable ({})",
                prefs.join(", "),
                why.join("; ")
            ),
            searched: Vec::new(),
        })
    }

    /// The backend that made `handle` (by its [`BackendId`]), to import it with.
    pub fn for_handle(&self, handle: &Handle) -> Result<Box<dyn DynBackend>> {
        match handle.backend {
            BackendId::External(id) => match hal_core::types::external_name(id) {
                Some(name) if registered_names().contains(&name) => self.open(&name),
                _ => Err(Error::NotFound {
                    what: format!(
                        "backend {id:#06x} of the handle: an out-of-tree backend not registered \
                         in this process; register it (hal::registry::register) or open it \
                         through its own crate"
                    ),
                }),
            },
            id => self.open(&id.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_canonical() {
        assert_eq!(canonical("mock").map(|k| k.name), Some("mock-cuda"));
        assert_eq!(canonical(" CPU_SHM ").map(|k| k.name), Some("cpu-shm"));
        assert_eq!(
            canonical("Mock-Ascend").map(|k| k.name),
            Some("mock-ascend")
        );
        assert!(canonical("gpu").is_none());
        for known in KNOWN {
            assert_eq!(known.id.name(), known.name, "registry and wire names agree");
        }
    }

    #[test]
    fn compiled_in_matches_the_slots() {
        let names: Vec<String> = Registry::new()
            .entries()
            .into_iter()
            .map(|e| e.name)
            .collect();
        let ours: Vec<&String> = names
            .iter()
            .filter(|n| compiled_in().contains(&n.as_str()))
            .collect();
        assert_eq!(ours, compiled_in(), "{names:?}");
    }

    #[test]
    fn a_failing_constructor_is_listed_unavailable() {
        fn fails() -> Result<Box<dyn DynBackend>> {
            Err(Error::Unavailable {
                backend: hal_core::BackendId::Cuda,
                reason: "libcuda.so.1 not found".into(),
                searched: vec!["/usr/lib".into()],
            })
        }
        fn panics() -> Result<Box<dyn DynBackend>> {
            panic!("driver exploded")
        }
        fn io_error() -> Result<Box<dyn DynBackend>> {
            Err(Error::invalid("bad environment"))
        }
        match probe(BackendId::Cuda, &fails) {
            Probed::Failed { reason, searched } => {
                assert_eq!(reason, "libcuda.so.1 not found");
                assert_eq!(searched, vec![PathBuf::from("/usr/lib")]);
            }
            Probed::Ready(_) => panic!("constructed"),
        }
        match probe(BackendId::Cuda, &panics) {
            Probed::Failed { reason, .. } => {
                assert!(reason.contains("driver exploded"), "{reason}")
            }
            Probed::Ready(_) => panic!("constructed"),
        }
        match probe(BackendId::Cuda, &io_error) {
            Probed::Failed { reason, .. } => {
                assert!(reason.contains("bad environment"), "{reason}")
            }
            Probed::Ready(_) => panic!("constructed"),
        }
    }

    #[test]
    fn a_registered_backend_is_listed_and_a_failing_one_says_why() {
        fn fails() -> Result<Box<dyn DynBackend>> {
            Err(Error::invalid("no device here"))
        }
        fn panics() -> Result<Box<dyn DynBackend>> {
            panic!("the vendor runtime exploded")
        }
        register("unit-fails", 0xfe30, fails).unwrap();
        register("unit-panics", 0xfe31, panics).unwrap();
        let registry = Registry::new();
        let entries = registry.entries();
        for (name, why) in [
            ("unit-fails", "no device here"),
            ("unit-panics", "exploded"),
        ] {
            let entry = entries.iter().find(|e| e.name == name).expect(name);
            match &entry.availability {
                Availability::Unavailable { reason, .. } => {
                    assert!(reason.contains(why), "{name}: {reason}")
                }
                Availability::Available => panic!("{name} is listed available"),
            }
            let e = registry.open(name).err().expect("an unavailable backend");
            assert!(matches!(e, Error::Unavailable { .. }), "{e}");
        }
        let ids: Vec<BackendId> = entries.iter().map(|e| e.id).collect();
        assert!(ids.contains(&BackendId::External(0xfe30)));
        assert_eq!(BackendId::External(0xfe31).to_string(), "unit-panics");
    }

    #[test]
    fn collisions_and_bad_names_are_refused() {
        fn none() -> Result<Box<dyn DynBackend>> {
            Err(Error::invalid("never opened"))
        }
        register("unit-first", 0xfe40, none).unwrap();
        register("unit-first", 0xfe40, none).unwrap();
        let e = register("unit-first", 0xfe41, none).unwrap_err();
        assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
        let e = register("unit-second", 0xfe40, none).unwrap_err();
        assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
        assert!(e.to_string().contains("unit-first"), "{e}");
        for taken in ["cpu-shm", "mock", "cuda"] {
            let e = register(taken, 0xfe42, none).unwrap_err();
            assert!(matches!(e, Error::AlreadyExists { .. }), "{taken}: {e}");
        }
        let e = register("unit-low", 0x0200, none).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        let e = register("Unit Bad", 0xfe43, none).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        assert!(!registered_names()
            .iter()
            .any(|n| n == "unit-second" || n == "unit-low"));
    }

    #[cfg(feature = "template")]
    #[test]
    fn the_template_opens_by_name_and_for_its_handles() {
        let registry = Registry::new();
        let backend = registry.open("template").unwrap();
        assert_eq!(backend.id(), BackendId::External(hal_template_backend::ID));
        assert_eq!(backend.name(), "template");
        let device = backend.open(0).unwrap();
        let page = device.info().granularity_min;
        let memory = device.allocate(&hal_core::AllocDesc::host(page)).unwrap();
        let exported = device
            .export_memory(&*memory, &hal_core::ExportOptions::default())
            .unwrap();
        let handle = exported.handle().clone();
        assert_eq!(handle.backend.to_string(), "template");
        let found = registry.for_handle(&handle).unwrap();
        assert_eq!(found.name(), "template");
        let names: Vec<String> = registry.entries().into_iter().map(|e| e.name).collect();
        let template = names.iter().position(|n| n == "template").unwrap();
        assert!(
            template >= KNOWN.iter().filter(|k| k.make.is_some()).count(),
            "after hal's own: {names:?}"
        );
    }
}
