//! Events and notifies as a door holds them: the object, its device and
//! its exports ([`KeptObject`]), imported and exported the same way for
//! both kinds; what differs is the device's call, which the caller gives.

use std::sync::Arc;

use hal_core::{ExportOptions, Exported, Handle, Result, SharedHandle};

use super::device::{device_for, DeviceObj};
use super::kept::KeptObject;

/// An event or a notify (`T`), its device and its exports.
pub type SyncObj<T> = KeptObject<T, DeviceObj>;

/// Import `handle` with `import` (the device's call) on the device the
/// handle names.
pub fn import_sync<T: ?Sized>(
    handle: Handle,
    import: impl FnOnce(&DeviceObj, SharedHandle) -> Result<Box<T>>,
) -> Result<Arc<SyncObj<T>>> {
    let device = Arc::new(device_for(&handle)?);
    let obj = import(&device, SharedHandle::from(handle))?;
    Ok(SyncObj::new(device, obj))
}

/// Export `obj` with `opts` through `export` (the device's call), and keep
/// the export as long as the object: its handle text.
pub fn export_sync<T: ?Sized>(
    obj: &SyncObj<T>,
    opts: &ExportOptions,
    export: impl FnOnce(&DeviceObj, &T, &ExportOptions) -> Result<Exported>,
) -> Result<String> {
    let exported = export(&obj.device, &obj.obj, opts)?;
    Ok(obj.keep(exported))
}

#[cfg(all(test, feature = "cpu-shm"))]
mod tests {
    use super::*;
    use crate::objects::open_device;
    use hal_core::dynamic::DynNotify;
    use hal_core::{ImportOptions, WaitOptions};

    #[test]
    fn a_notify_exported_and_imported_wakes_its_creator() {
        let device = Arc::new(open_device(Some("cpu-shm"), 0).unwrap());
        let notify = device.device.create_notify().unwrap();
        let created: Arc<SyncObj<dyn DynNotify>> = SyncObj::new(device, notify);
        let text = export_sync(&created, &ExportOptions::default(), |d, n, o| {
            d.device.export_notify(n, o)
        })
        .unwrap();
        let handle = Handle::from_text(&text).unwrap();
        let imported = import_sync(handle, |d, shared| {
            d.device.import_notify(shared, &ImportOptions::default())
        })
        .unwrap();
        imported.obj.signal().unwrap();
        created.obj.wait(WaitOptions::default()).unwrap();
    }
}
