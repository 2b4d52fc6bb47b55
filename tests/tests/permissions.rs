//! Permissions: modes whatever the umask, other users' regions, region names,
//! and links planted where the library creates or reads files.
//!
//! Each scenario runs 21 times (a warm-up round and 20 more). Cross-user
//! cases need root here (to `fchown` an object to uid 65534 and to start a
//! process of that uid); without root they say so and check what they can.

mod reliability;

use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use hal_core::exchange::{self, HandleListener};
use hal_core::{
    Device, Error, ExportOptions, FdSource, Handle, HandleFlags, ImportOptions, Memory,
    SharedHandle,
};
use hal_cpu_shm::{named, CpuShm, NamedOptions};
use reliability::*;

const SIZE: u64 = 8192;

/// The child entry point: a role in a child process its parent started.
#[test]
#[ignore = "child entry point: run by its parent"]
fn __child() {
    let role = child_role();
    match role.as_str() {
        "umask" => umask_child(),
        "nobody" => nobody_child(),
        "ro-importer" => ro_importer(),
        other => panic!("unknown role {other}"),
    }
}

fn mode(path: impl AsRef<Path>) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

#[track_caller]
fn expect_kind<T>(r: Result<T, Error>, want: &str, what: &str) {
    match &r {
        Ok(_) => panic!("{what}: it succeeded; it must be refused with {want}"),
        Err(e) => assert_eq!(e.kind_name(), want, "{what}: {e}"),
    }
}

fn chown_nobody(fd: std::os::fd::BorrowedFd<'_>) {
    nix::unistd::fchown(
        fd.as_raw_fd(),
        Some(nix::unistd::Uid::from_raw(NOBODY)),
        Some(nix::unistd::Gid::from_raw(NOBODY)),
    )
    .unwrap();
}

/// A handle for the named region `name`, made from `template` (a genuine
/// named export): the text form decodes whatever the name says.
fn named_handle(template: &Handle, name: &str) -> Handle {
    let mut h = template.clone();
    h.flags.insert(HandleFlags::NAMED);
    h.fds = FdSource::None;
    h.payload = name.as_bytes().to_vec();
    h
}

// --- modes whatever the umask ----------------------------------------------------

#[test]
fn regions_and_handle_files_are_0600_whatever_the_umask() {
    let kid = Kid::spawn_with("umask", &[], |cmd| with_umask(cmd, 0));
    let prefix = format!("hal-rel-{}-", kid.pid());
    let _sweep = ShmSweep(prefix.clone());
    kid.finish();
    assert_no_shm(&prefix);
}

fn umask_child() {
    let dir = tempfile::tempdir().unwrap();
    let d = CpuShm::new().host();
    for i in 0..=ROUNDS {
        // The umask really is 000 here: a plain new file gets 0666.
        let plain = dir.path().join(format!("plain-{i}"));
        File::create(&plain).unwrap();
        assert_eq!(mode(&plain), 0o666, "the umask is not 000");

        let name = unique("umask");
        let region = named::create_named(&name, SIZE, &NamedOptions::default()).unwrap();
        assert_eq!(mode(format!("/dev/shm/{name}")), 0o600, "a named region");
        assert_eq!(
            mode(format!("/dev/shm/.hal-meta.{name}")),
            0o600,
            "a named region's metadata"
        );

        let ex = d.export_memory(&region, &ExportOptions::default()).unwrap();
        let hfile = dir.path().join(format!("handle-{i}"));
        exchange::write_handle_file(&hfile, ex.handle()).unwrap();
        assert_eq!(mode(&hfile), 0o600, "a handle file");

        let sock = dir.path().join(format!("sock-{i}"));
        let listener = HandleListener::bind(&sock).unwrap();
        assert_eq!(mode(&sock), 0o600, "a handle socket file");

        let fpath = dir.path().join(format!("file-{i}"));
        let file = hal_cpu_shm::create_file_backed(&fpath, SIZE).unwrap();
        assert_eq!(mode(&fpath), 0o600, "a file-backed region");

        drop((file, listener, ex, region));
        assert_no_shm(&name);
    }
    // Nothing but the files this test made itself.
    let left = fs::read_dir(dir.path()).unwrap().count() as u32;
    assert_eq!(left, 3 * (ROUNDS + 1), "temporary files left behind");
}

// --- other users' regions ---------------------------------------------------------

#[test]
fn other_users_regions_are_refused() {
    if !is_root() {
        hal_core::testing::not_run(
            "refusing another user's region needs a region of another uid, which only root can \
             make here (fchown, setuid)",
        );
        return;
    }
    let d = CpuShm::new().host();
    let scope = unique("users-");
    let _sweep = ShmSweep(scope.clone());
    // A region chowned to another user, here.
    for _ in 0..=ROUNDS {
        let name = scoped(&scope, "chowned");
        let region = named::create_named(&name, SIZE, &NamedOptions::default()).unwrap();
        region.write(0, b"root's").unwrap();
        let ex = d.export_memory(&region, &ExportOptions::default()).unwrap();
        let text = ex.to_text();
        chown_nobody(region.fd());
        expect_kind(named::open_named(&name, None), "permission-denied", "open");
        expect_kind(
            named::open_named_read_only(&name, None),
            "permission-denied",
            "open read-only",
        );
        expect_kind(named::unlink_named(&name), "permission-denied", "unlink");
        expect_kind(
            d.import_memory(
                SharedHandle::from(exchange::decode(&text).unwrap()),
                &ImportOptions::default(),
            ),
            "permission-denied",
            "import of a named handle",
        );
        // Never collected either: its owner is not the metadata's.
        assert!(named::collect_garbage_prefix(&name, false)
            .unwrap()
            .is_empty());
        assert_eq!(shm_entries(&name).len(), 2);
        // Its creator's own drop still removes what it created.
        drop((ex, region));
        assert_no_shm(&name);
    }
    // A process of uid 65534 and root refuse each other's regions.
    let mut nobody = Kid::spawn_with("nobody", &[], |cmd| {
        std::os::unix::process::CommandExt::uid(cmd, NOBODY);
        std::os::unix::process::CommandExt::gid(cmd, NOBODY);
    });
    let nobody_prefix = format!("hal-rel-{}-", nobody.pid());
    let _sweep2 = ShmSweep(nobody_prefix.clone());
    for i in 0..=ROUNDS {
        let theirs = nobody.expect("created");
        assert_eq!(
            fs::metadata(format!("/dev/shm/{theirs}")).unwrap().uid(),
            NOBODY
        );
        expect_kind(
            named::open_named(&theirs, None),
            "permission-denied",
            "root opens theirs",
        );
        expect_kind(
            named::unlink_named(&theirs),
            "permission-denied",
            "root unlinks theirs",
        );
        let mine = scoped(&scope, "root-owned");
        let region = named::create_named(&mine, SIZE, &NamedOptions::default()).unwrap();
        nobody.tell(&mine);
        assert_eq!(nobody.expect("open"), "permission-denied", "round {i}");
        assert_eq!(nobody.expect("create"), "already-exists", "round {i}");
        assert_eq!(nobody.expect("unlink"), "permission-denied", "round {i}");
        drop(region);
        assert_no_shm(&mine);
    }
    nobody.tell("done");
    nobody.finish();
    assert_no_shm(&nobody_prefix);
}

fn nobody_child() {
    assert_eq!(nix::unistd::geteuid().as_raw(), NOBODY);
    loop {
        let name = unique("nobody");
        let region = named::create_named(&name, SIZE, &NamedOptions::default()).unwrap();
        say("created", &name);
        let roots = hear();
        if roots == "done" {
            break;
        }
        say("open", kind(&named::open_named(&roots, None)));
        say(
            "create",
            kind(&named::create_named(&roots, SIZE, &NamedOptions::default())),
        );
        say("unlink", kind(&named::unlink_named(&roots)));
        drop(region);
    }
}

// --- names ----------------------------------------------------------------------

#[test]
fn bad_region_names_are_refused() {
    let d = CpuShm::new().host();
    let marker = unique("bad");
    let long = format!("{marker}{}", "x".repeat(named::MAX_NAME_LEN));
    let bad = [
        String::new(),
        format!("{marker}/sub"),
        format!("/{marker}"),
        "..".to_string(),
        format!("..{marker}"),
        format!("{marker}/../{marker}"),
        format!("{marker}\0tail"),
        format!(".{marker}"),
        format!(".hal-meta.{marker}"),
        format!("{marker}\ttab"),
        format!("{marker}\u{e9}"),
        long.clone(),
    ];
    let scope = unique("names-");
    let _sweep = ShmSweep(scope.clone());
    let template_region =
        named::create_named(&scoped(&scope, "template"), SIZE, &NamedOptions::default()).unwrap();
    let template = d
        .export_memory(&template_region, &ExportOptions::default())
        .unwrap()
        .handle()
        .clone();
    let before = shm_entries("");
    for _ in 0..=ROUNDS {
        for name in &bad {
            let what = format!("name {name:?}");
            expect_kind(
                named::create_named(name, SIZE, &NamedOptions::default()),
                "invalid-argument",
                &format!("create {what}"),
            );
            expect_kind(named::open_named(name, None), "invalid-argument", &what);
            expect_kind(
                named::open_named_read_only(name, None),
                "invalid-argument",
                &what,
            );
            expect_kind(named::unlink_named(name), "invalid-argument", &what);
            if !name.is_empty() {
                expect_kind(
                    d.import_memory(
                        SharedHandle::from(named_handle(&template, name)),
                        &ImportOptions::default(),
                    ),
                    "invalid-argument",
                    &format!("import of a handle naming {what}"),
                );
            }
        }
        // The longest valid name works.
        let longest = &long[..named::MAX_NAME_LEN];
        drop(named::create_named(longest, SIZE, &NamedOptions::default()).unwrap());
        assert_no_shm(&marker);
    }
    assert!(shm_entries(&marker).is_empty());
    let after = shm_entries("");
    let new: Vec<_> = after
        .iter()
        .filter(|n| !before.contains(n) && n.contains(&marker))
        .collect();
    assert!(new.is_empty(), "{new:?}");
}

// --- links ------------------------------------------------------------------------

#[test]
fn handle_files_are_not_followed_through_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let d = CpuShm::new().host();
    let scope = unique("files-");
    let _sweep = ShmSweep(scope.clone());
    let region =
        named::create_named(&scoped(&scope, "link"), SIZE, &NamedOptions::default()).unwrap();
    let ex = d.export_memory(&region, &ExportOptions::default()).unwrap();
    let h = ex.handle().clone();
    for i in 0..=ROUNDS {
        // A link to a file that holds a valid handle and that must not change.
        let target = dir.path().join(format!("target-{i}"));
        exchange::write_handle_file(&target, &h).unwrap();
        let precious = fs::read(&target).unwrap();
        let link = dir.path().join(format!("link-{i}"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        expect_kind(
            exchange::write_handle_file(&link, &h),
            "permission-denied",
            "writing a handle file through a link",
        );
        expect_kind(
            exchange::read_handle_file(&link),
            "permission-denied",
            "reading a handle file through a link",
        );
        assert_eq!(fs::read(&target).unwrap(), precious);
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        // A dangling link: nothing is created where it points.
        let nowhere = dir.path().join(format!("nowhere-{i}"));
        let dangling = dir.path().join(format!("dangling-{i}"));
        std::os::unix::fs::symlink(&nowhere, &dangling).unwrap();
        expect_kind(
            exchange::write_handle_file(&dangling, &h),
            "permission-denied",
            "writing through a dangling link",
        );
        assert!(!nowhere.exists());
        // A FIFO at the path: refused at once, no hang.
        let fifo = dir.path().join(format!("fifo-{i}"));
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        expect_kind(
            exchange::read_handle_file(&fifo),
            "invalid-argument",
            "a FIFO",
        );
        expect_kind(
            exchange::write_handle_file(&fifo, &h),
            "invalid-argument",
            "a FIFO",
        );
        // A directory.
        expect_kind(
            exchange::read_handle_file(dir.path()),
            "invalid-argument",
            "a directory",
        );
        // A socket listener does not bind over the link, a file-backed region
        // is not opened or created through it.
        expect_kind(
            HandleListener::bind(&link),
            "already-exists",
            "a socket over a link",
        );
        expect_kind(
            hal_cpu_shm::open_file_backed(&link),
            "io",
            "a file-backed region through a link",
        );
        expect_kind(
            hal_cpu_shm::create_file_backed(&link, SIZE),
            "already-exists",
            "creating a file-backed region at a link",
        );
        assert_eq!(fs::read(&target).unwrap(), precious);
        // Through its own path, the handle file reads.
        assert_eq!(exchange::read_handle_file(&target).unwrap(), h);
    }
    // No temporary files were left by the refused writes.
    let stray: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

#[test]
fn named_regions_are_not_followed_through_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let scope = unique("links-");
    let _sweep = ShmSweep(scope.clone());
    for i in 0..=ROUNDS {
        let target = dir.path().join(format!("target-{i}"));
        File::create(&target)
            .unwrap()
            .write_all(b"precious")
            .unwrap();
        // A link planted where a region would be.
        let name = scoped(&scope, "planted");
        let planted = format!("/dev/shm/{name}");
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        expect_kind(
            named::open_named(&name, None),
            "permission-denied",
            "opening a region that is a link",
        );
        expect_kind(
            named::create_named(&name, SIZE, &NamedOptions::default()),
            "already-exists",
            "creating over a link",
        );
        expect_kind(
            named::unlink_named(&name),
            "permission-denied",
            "unlinking a region that is a link",
        );
        fs::remove_file(&planted).unwrap();
        // A link planted where the region's metadata would go.
        let name = scoped(&scope, "meta-planted");
        let meta = format!("/dev/shm/.hal-meta.{name}");
        std::os::unix::fs::symlink(&target, &meta).unwrap();
        let region = named::create_named(&name, SIZE, &NamedOptions::default()).unwrap();
        assert!(fs::symlink_metadata(&meta).unwrap().is_file());
        assert_eq!(mode(&meta), 0o600);
        drop(region);
        assert_eq!(fs::read(&target).unwrap(), b"precious");
        assert_no_shm(&name);
    }
}

// --- what a read-only named handle does and does not do ----------------------------

#[test]
fn read_only_named_handles_bind_only_the_library() {
    let d = CpuShm::new().host();
    let scope = unique("ro-");
    let _sweep = ShmSweep(scope.clone());
    let mut importer = Kid::spawn("ro-importer", &[]);
    for i in 0..=ROUNDS {
        let name = scoped(&scope, "ro");
        let region = named::create_named(&name, SIZE, &NamedOptions::default()).unwrap();
        region.write(0, b"original").unwrap();
        let ex = d
            .export_memory(
                &region,
                &ExportOptions {
                    read_only: true,
                    ..ExportOptions::default()
                },
            )
            .unwrap();
        importer.tell(&ex.to_text());
        // Through the handle, the other process cannot write ...
        assert_eq!(
            importer.expect("import-write"),
            "permission-denied",
            "round {i}"
        );
        // ... but a process of the same user opens the name read-write.
        assert_eq!(importer.expect("open-write"), "ok", "round {i}");
        let mut b = [0u8; 8];
        region.read(0, &mut b).unwrap();
        assert_eq!(&b, b"escaped!", "round {i}");
        drop((ex, region));
        assert_no_shm(&name);
    }
    importer.tell("done");
    importer.finish();
}

fn ro_importer() {
    let d = CpuShm::new().host();
    loop {
        let text = hear();
        if text == "done" {
            break;
        }
        let m = d
            .import_memory(
                SharedHandle::from(exchange::decode(&text).unwrap()),
                &ImportOptions::default(),
            )
            .unwrap();
        assert!(m.is_read_only());
        say("import-write", kind(&m.write(0, b"escaped!")));
        let name = String::from_utf8(hal_core::Mapping::handle(&m).payload.clone()).unwrap();
        let rw = named::open_named(&name, None).unwrap();
        say("open-write", kind(&rw.write(0, b"escaped!")));
    }
}
