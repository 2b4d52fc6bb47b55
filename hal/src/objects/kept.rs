//! Exports kept as long as the object they export: what a language door
//! (the C library, the Python package) holds for an object whose exports
//! the caller does not own.

use std::sync::{Arc, Mutex};

use hal_core::{Exported, Handle, Notify, Result, WaitFuture, WaitOptions};

/// `mutex`, locked; a panic elsewhere while it was held does not stop it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The exports of one object, kept until it drops. Declare it before the
/// object's other fields: fields drop in order, and an export must stop
/// (unregister from the broker) before what it exports goes.
#[derive(Debug, Default)]
pub struct KeptExports(Mutex<Vec<Exported>>);

impl KeptExports {
    /// Keep `exported` as long as this value; its handle.
    pub fn keep(&self, exported: Exported) -> Handle {
        let handle = exported.handle().clone();
        lock(&self.0).push(exported);
        handle
    }

    /// How many exports are kept.
    pub fn len(&self) -> usize {
        lock(&self.0).len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An object a language door hands out (an event or a notify: `T`), the
/// door's record of the device it belongs to (`D`), and the object's
/// exports, kept until it goes. The exports drop first.
pub struct KeptObject<T: ?Sized, D> {
    exports: KeptExports,
    /// The object.
    pub obj: Box<T>,
    /// Its device.
    pub device: Arc<D>,
}

impl<T: ?Sized, D> KeptObject<T, D> {
    /// `obj` of `device`, not exported yet.
    pub fn new(device: Arc<D>, obj: Box<T>) -> Arc<KeptObject<T, D>> {
        Arc::new(KeptObject {
            exports: KeptExports::default(),
            obj,
            device,
        })
    }

    /// Keep `exported` (an export of the object) as long as the object;
    /// its handle text.
    pub fn keep(&self, exported: Exported) -> String {
        self.exports.keep(exported).to_text()
    }
}

/// A kept notify is a notify: a door hands it to what takes any
/// [`Notify`] (an export to other hosts) while it stays the door's object.
impl<T: Notify + ?Sized, D: Send + Sync> Notify for KeptObject<T, D> {
    fn signal(&self) -> Result<()> {
        self.obj.signal()
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        self.obj.wait(opts)
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        self.obj.wait_async(opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hal_core::kit::export::{new_handle, HandleSpec};
    use hal_core::{BackendId, ExportOptions, HandleKind, Location};

    #[test]
    fn an_export_is_kept_and_its_handle_given() {
        let spec = HandleSpec {
            kind: HandleKind::Memory,
            backend: BackendId::CpuShm,
            device: 0,
            device_uuid: [0; 16],
            location: Location::Host,
            default_allow_list: false,
        };
        let handle = new_handle(&spec, &ExportOptions::default()).unwrap();
        let kept = KeptExports::default();
        assert!(kept.is_empty());
        let given = kept.keep(Exported::new(handle.clone(), Vec::new()).unwrap());
        assert_eq!(given, handle);
        assert_eq!(kept.len(), 1);
        let object = KeptObject::new(Arc::new("device"), Box::new(7u8));
        let text = object.keep(Exported::new(handle.clone(), Vec::new()).unwrap());
        assert_eq!(text, handle.to_text());
        assert_eq!(object.exports.len(), 1);
        assert_eq!((*object.obj, *object.device), (7, "device"));
    }

    /// A notify that counts its signals and answers its waits from them.
    #[derive(Default)]
    struct Counted(std::sync::atomic::AtomicU32);

    impl Notify for Counted {
        fn signal(&self) -> Result<()> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
        fn wait(&self, opts: WaitOptions) -> Result<()> {
            match self.0.swap(0, std::sync::atomic::Ordering::SeqCst) {
                0 => Err(hal_core::Error::Timeout {
                    after: opts.timeout.unwrap_or_default(),
                    what: "a count".into(),
                }),
                _ => Ok(()),
            }
        }
        fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
            Box::pin(std::future::ready(self.wait(opts)))
        }
    }

    #[test]
    fn a_kept_notify_is_the_notify_it_keeps() {
        let kept: Arc<KeptObject<dyn Notify, &str>> =
            KeptObject::new(Arc::new("device"), Box::new(Counted::default()));
        let notify: Arc<dyn Notify> = kept.clone();
        assert!(notify.wait(WaitOptions::default()).is_err());
        notify.signal().unwrap();
        kept.obj.signal().unwrap();
        assert!(notify.wait(WaitOptions::default()).is_ok());
        assert!(notify.wait(WaitOptions::default()).is_err());
    }
}
