//! What binds a board entry to its export, so that an importer never takes
//! an object's identity from the board alone.
//!
//! Any process that may open the exporter's descriptors through
//! `/proc/PID/fd` (its own user, where the exporter is dumpable) can write
//! the board, whether or not it may use `pidfd_getfd`: it could point one
//! export's entry at another export's descriptor, with that descriptor's
//! true device and inode, and an honest importer of the first would map
//! the second. So an entry holds no object id, only two words derived from
//! it with SipHash-2-4 keyed by the id: a **key**, by which the entry is
//! found, and a **tag** over the device and inode of each of its
//! descriptors, which the importer computes again from the id its handle
//! carries (the handle vouches for the export) and from the descriptors it
//! is about to take. Without the id, which the board never shows, no
//! process can write a tag that an importer accepts for other descriptors.

use siphasher::sip::SipHasher24;
use std::hash::Hasher;

use super::super::located::Located;

/// SipHash-2-4 of `words`, keyed by `id`, with `domain` first.
fn sip(id: &[u8; 16], domain: &[u8], words: impl IntoIterator<Item = u64>) -> u64 {
    let mut h = SipHasher24::new_with_key(id);
    h.write(domain);
    for w in words {
        h.write(&w.to_le_bytes());
    }
    h.finish()
}

/// The word by which the entry of the export `id` is found.
pub(crate) fn key(id: &[u8; 16]) -> u64 {
    sip(id, b"hal board key", [])
}

/// The word that binds the entry of the export `id` to the descriptors
/// `fds` (their devices and inodes, in order).
pub(crate) fn tag(id: &[u8; 16], fds: &[Located]) -> u64 {
    sip(
        id,
        b"hal board tag",
        fds.iter().flat_map(|f| [f.dev, f.ino]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(dev: u64, ino: u64) -> Located {
        Located { fd: 3, dev, ino }
    }

    #[test]
    fn the_tag_binds_the_id_and_every_identity_in_order() {
        let (a, b) = ([1u8; 16], [2u8; 16]);
        let fds = [at(1, 10), at(1, 11)];
        let t = tag(&a, &fds);
        assert_eq!(t, tag(&a, &fds), "the same inputs, the same tag");
        assert_ne!(t, tag(&b, &fds), "another export's id");
        assert_ne!(t, tag(&a, &[at(1, 10), at(1, 12)]), "another inode");
        assert_ne!(t, tag(&a, &[at(2, 10), at(1, 11)]), "another device");
        assert_ne!(t, tag(&a, &[at(1, 11), at(1, 10)]), "another order");
        assert_ne!(t, tag(&a, &fds[..1]), "fewer descriptors");
        // The descriptor number is not bound: the identity is.
        assert_eq!(t, tag(&a, &[Located { fd: 9, ..fds[0] }, fds[1]]));
    }

    #[test]
    fn keys_differ_between_ids_and_from_tags() {
        let (a, b) = ([1u8; 16], [2u8; 16]);
        assert_ne!(key(&a), key(&b));
        assert_ne!(key(&a), tag(&a, &[]), "the domains differ");
    }

    #[test]
    fn the_hash_is_siphash_2_4_as_specified() {
        // The words are part of the board's layout, which other builds of
        // hal read: the reference vector of SipHash-2-4 (key 00..0f, no
        // input: 0x726fdb47dd0e0e31, the paper's appendix).
        let mut k = [0u8; 16];
        for (i, b) in k.iter_mut().enumerate() {
            *b = i as u8;
        }
        assert_eq!(sip(&k, b"", []), 0x726f_db47_dd0e_0e31);
    }
}
