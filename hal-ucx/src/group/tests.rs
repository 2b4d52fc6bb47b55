//! The server's side against a joiner that stops in its handshake, with
//! the crate's own connection (a real node of this process, over UCX on
//! the loopback).

use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hal_core::testing::not_run;
use hal_core::Error;

use super::joiner::Joined;
use super::wire::{Message, Refusal};
use super::{RemoteGroup, RemoteGroupOptions};
use crate::node::Node;

/// A port of the loopback that nothing listens on now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn a_joiner_that_stops_in_its_handshake_is_refused_after_the_timeout() {
    let node = match Node::bind("127.0.0.1:0".parse().unwrap()) {
        Ok(n) => n,
        Err(e @ (Error::Unavailable { .. } | Error::Unsupported { .. })) => {
            return not_run(&format!("UCX cannot be used here: {e}"));
        }
        Err(e) => panic!("making a node: {e}"),
    };
    let at: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let timeout = Duration::from_millis(1500);
    let options = RemoteGroupOptions::default()
        .secret([7; 16])
        .timeout(timeout);
    let (go_a, wait_a) = mpsc::channel::<()>();
    let (go_b, wait_b) = mpsc::channel::<()>();
    let member = |wait: mpsc::Receiver<()>| {
        let options = options.clone();
        std::thread::spawn(move || {
            let mut g = RemoteGroup::join_at(at, "stalled", 2, &options)?;
            wait.recv().unwrap();
            g.barrier().map(|()| g.rank())
        })
    };
    // The server, then a connection that says hello and stops there.
    let server = member(wait_a);
    let hello = Message::Hello {
        size: 2,
        max_payload: 4096,
        nonce: [1; 16],
        name: "stalled".into(),
    };
    let until = Instant::now() + Duration::from_secs(30);
    let stalled = loop {
        let j = Joined::connect(node.owner(), at).unwrap();
        j.send(&hello).unwrap();
        match j.receive(until) {
            Ok(Message::Challenge { .. }) => break j,
            Ok(other) => panic!("{other:?}"),
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("{e}"),
        }
    };
    // It takes no rank: the next joiner forms the group.
    let joiner = member(wait_b);
    // Past the timeout, the member's next message makes the server look.
    std::thread::sleep(timeout + Duration::from_millis(200));
    go_a.send(()).unwrap();
    go_b.send(()).unwrap();
    let mut ranks = vec![
        server.join().unwrap().unwrap(),
        joiner.join().unwrap().unwrap(),
    ];
    ranks.sort_unstable();
    assert_eq!(ranks, [0, 1]);
    match stalled.receive(Instant::now() + Duration::from_secs(30)) {
        Ok(Message::Denied {
            why: Refusal::Protocol,
            ..
        }) => {}
        other => panic!("the stalled joiner got {other:?}"),
    }
}
