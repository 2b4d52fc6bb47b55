//! Which objects a process maps, as `/proc/PID/maps` lists them: how a
//! lock word in shared memory is checked against the processes that can
//! really have written it.

/// The device (as `/proc/PID/maps` prints it, `MAJOR:MINOR` in hex) and
/// inode of a mapping line, and its address range.
fn parse(line: &str) -> Option<(usize, usize, &str, u64)> {
    let mut f = line.split_ascii_whitespace();
    let (start, end) = f.next()?.split_once('-')?;
    let (start, end) = (
        usize::from_str_radix(start, 16).ok()?,
        usize::from_str_radix(end, 16).ok()?,
    );
    let _perms = f.next()?;
    let _offset = f.next()?;
    let dev = f.next()?;
    let inode = f.next()?.parse().ok()?;
    Some((start, end, dev, inode))
}

/// The object (device and inode, as `/proc/self/maps` names them) that
/// this process maps at `addr`; `None` for anonymous memory or when it
/// cannot be read.
fn object_at(addr: usize) -> Option<(String, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(parse)
        .find(|&(start, end, _, _)| start <= addr && addr < end)
        .filter(|&(_, _, _, inode)| inode != 0)
        .map(|(_, _, dev, inode)| (dev.to_owned(), inode))
}

/// Whether process `pid` maps the object that this process maps at
/// `addr` (a shared memory file: a memfd, a file of `/dev/shm`):
/// `Some(true)` or `Some(false)` from its `/proc/PID/maps`, `None` when
/// that cannot be told (the list cannot be read: another user's process,
/// `hidepid`; or `addr` maps no file here).
pub fn maps_same_object(pid: u32, addr: *const u8) -> Option<bool> {
    let (dev, inode) = object_at(addr as usize)?;
    let theirs = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    if theirs.is_empty() {
        // A kernel thread, or a process that exited meanwhile.
        return Some(false);
    }
    Some(
        theirs
            .lines()
            .filter_map(parse)
            .any(|(_, _, d, i)| d == dev && i == inode),
    )
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, AsRawFd};

    use super::*;
    use crate::kit::os::{memfd, Prot, SharedMap};

    #[test]
    fn this_process_maps_its_memfd_and_a_child_does_not() {
        let fd = memfd("maps-test", 4096, None).unwrap();
        let map = SharedMap::map(fd.as_fd(), 4096, 0, Prot::ReadWrite, None).unwrap();
        let addr = map.as_ptr();
        assert_eq!(maps_same_object(std::process::id(), addr), Some(true));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let theirs = maps_same_object(child.id(), addr);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(theirs, Some(false));
    }

    #[test]
    fn another_object_of_the_same_device_is_not_the_same_object() {
        let fd = memfd("maps-test-same-dev", 4096, None).unwrap();
        let map = SharedMap::map(fd.as_fd(), 4096, 0, Prot::ReadWrite, None).unwrap();
        let addr = map.as_ptr();
        let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
        let (ready_r, ready_w) = nix::unistd::pipe2(cloexec).unwrap();
        let (done_r, done_w) = nix::unistd::pipe2(cloexec).unwrap();
        // SAFETY: the child makes only system calls (no allocation, no
        // lock) until it exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                // SAFETY: raw system calls on this process's own memory and
                // descriptors; `_exit` ends the child without unwinding.
                unsafe {
                    // The child unmaps the parent's memfd and maps another
                    // memfd instead: the same device (shmem), another inode.
                    libc::munmap(addr as *mut libc::c_void, 4096);
                    let other = libc::memfd_create(c"maps-test-other".as_ptr(), 0);
                    libc::ftruncate(other, 4096);
                    libc::mmap(
                        std::ptr::null_mut(),
                        4096,
                        libc::PROT_READ,
                        libc::MAP_SHARED,
                        other,
                        0,
                    );
                    libc::close(done_w.as_raw_fd());
                    libc::write(ready_w.as_raw_fd(), [1u8].as_ptr().cast(), 1);
                    let mut b = [0u8; 1];
                    libc::read(done_r.as_raw_fd(), b.as_mut_ptr().cast(), 1);
                    libc::_exit(0);
                }
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop((ready_w, done_r));
                let mut b = [0u8; 1];
                assert_eq!(
                    nix::unistd::read(ready_r.as_raw_fd(), &mut b),
                    Ok(1),
                    "the child is ready"
                );
                let theirs = maps_same_object(child.as_raw() as u32, addr);
                drop(done_w);
                nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(theirs, Some(false), "another memfd of the same device");
                assert_eq!(maps_same_object(std::process::id(), addr), Some(true));
            }
        }
    }

    #[test]
    fn every_byte_of_a_mapping_and_none_past_its_end_is_its_object() {
        const PAGE: usize = 4096;
        let fd = memfd("maps-test-bounds", PAGE as u64, None).unwrap();
        let me = std::process::id();
        // SAFETY: a new private anonymous reservation of three pages; the
        // memfd is mapped over its first page only (MAP_FIXED inside the
        // reservation), so the page after it is anonymous; all of it is
        // unmapped at the end and nothing else uses it.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                3 * PAGE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            let got = libc::mmap(
                base,
                PAGE,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            );
            assert_eq!(got, base);
            let at = |off: usize| maps_same_object(me, base.cast::<u8>().add(off));
            let answers = [at(0), at(PAGE - 1), at(PAGE)];
            libc::munmap(base, 3 * PAGE);
            assert_eq!(
                answers,
                [Some(true), Some(true), None],
                "its first and last byte, and the anonymous page after it"
            );
        }
    }

    #[test]
    fn anonymous_memory_cannot_be_told() {
        let v = vec![0u8; 1 << 20];
        assert_eq!(maps_same_object(std::process::id(), v.as_ptr()), None);
    }

    #[test]
    fn a_line_of_the_maps_list_is_parsed() {
        let line = "7f00a000-7f00b000 rw-s 00000000 00:01 2049  /memfd:x (deleted)";
        assert_eq!(parse(line), Some((0x7f00a000, 0x7f00b000, "00:01", 2049)));
        assert_eq!(parse("garbage"), None);
    }
}
