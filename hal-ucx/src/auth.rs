//! The proof that a peer holds a remote handle's secret, without the
//! secret on the wire: each side sends a fresh random nonce, and each
//! proves itself with HMAC-SHA-256 keyed by the secret over its role, the
//! export and both nonces (its peer's first). The roles differ, so a proof
//! cannot be sent back to its maker; the nonces are fresh per connection,
//! so a proof seen on the network cannot be replayed.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Who proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The exporter, answering a hello.
    Exporter,
    /// The importer, answering a challenge.
    Importer,
    /// A group's server, answering a joiner's hello (no export: id 0).
    GroupServer,
    /// A group's joiner, answering the server's challenge (id 0).
    GroupMember,
    /// A channel's publisher side, answering a remote subscriber's hello.
    ChannelPublisher,
    /// A channel's remote subscriber, answering the publisher's challenge.
    ChannelSubscriber,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Exporter => b"hal1r exporter",
            Role::Importer => b"hal1r importer",
            Role::GroupServer => b"hal1g server",
            Role::GroupMember => b"hal1g member",
            Role::ChannelPublisher => b"hal1c publisher",
            Role::ChannelSubscriber => b"hal1c subscriber",
        }
    }
}

fn mac(
    secret: &[u8; 16],
    role: Role,
    export_id: u64,
    peer: &[u8; 16],
    own: &[u8; 16],
) -> Hmac<Sha256> {
    // HMAC takes a key of any length: `new_from_slice` cannot fail.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of every length"));
    m.update(role.label());
    m.update(&export_id.to_le_bytes());
    m.update(peer);
    m.update(own);
    m
}

/// `role`'s proof for the export, over its peer's nonce then its own.
pub(crate) fn prove(
    secret: &[u8; 16],
    role: Role,
    export_id: u64,
    peer: &[u8; 16],
    own: &[u8; 16],
) -> [u8; 32] {
    mac(secret, role, export_id, peer, own)
        .finalize()
        .into_bytes()
        .into()
}

/// True when `proof` is `role`'s proof (compared in constant time).
pub(crate) fn verify(
    secret: &[u8; 16],
    role: Role,
    export_id: u64,
    peer: &[u8; 16],
    own: &[u8; 16],
    proof: &[u8; 32],
) -> bool {
    mac(secret, role, export_id, peer, own)
        .verify_slice(proof)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_verifies_only_for_its_secret_role_export_and_nonces() {
        let (s, a, b) = ([1u8; 16], [2u8; 16], [3u8; 16]);
        let p = prove(&s, Role::Importer, 9, &a, &b);
        assert!(verify(&s, Role::Importer, 9, &a, &b, &p));
        assert!(!verify(&[4; 16], Role::Importer, 9, &a, &b, &p));
        assert!(!verify(&s, Role::Exporter, 9, &a, &b, &p));
        assert!(!verify(&s, Role::GroupMember, 9, &a, &b, &p));
        let g = prove(&s, Role::GroupServer, 0, &a, &b);
        assert!(verify(&s, Role::GroupServer, 0, &a, &b, &g));
        assert!(!verify(&s, Role::GroupMember, 0, &a, &b, &g));
        assert!(!verify(&s, Role::Importer, 8, &a, &b, &p));
        assert!(!verify(&s, Role::Importer, 9, &b, &a, &p));
        assert!(!verify(&s, Role::Importer, 9, &a, &[5; 16], &p));
        let mut q = p;
        q[31] ^= 1;
        assert!(!verify(&s, Role::Importer, 9, &a, &b, &q));
    }

    #[test]
    fn hmac_sha256_is_the_published_function() {
        // RFC 4231, test case 2: key "Jefe".
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        let out: [u8; 32] = m.finalize().into_bytes().into();
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
