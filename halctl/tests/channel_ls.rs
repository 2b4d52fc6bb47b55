//! `halctl channel ls` shows a live channel as its publisher and
//! subscriber see it, and no longer once they are gone.

use std::process::Command;

use hal::channel::{ChannelOptions, Publisher, SubscribeOptions, Subscriber};
use hal::cpu_shm::CpuShm;
use hal::Backend;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");

fn listed(name: &str) -> Option<Value> {
    let out = Command::new(BIN)
        .args(["channel", "ls", "--json"])
        .output()
        .expect("run halctl");
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    v["channels"]
        .as_array()
        .expect("a list of channels")
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
}

#[test]
fn a_live_channel_is_listed_and_a_closed_one_is_not() {
    let name = format!("halctl-ls-{}", std::process::id());
    let device = CpuShm::new().open(0).expect("open cpu-shm");
    let mut publisher = Publisher::create(
        &device,
        &name,
        &ChannelOptions::default().slots(4).slot_size(4096),
    )
    .expect("create");
    let subscriber =
        Subscriber::open(&device, &name, &SubscribeOptions::default()).expect("subscribe");
    for i in 0..2u8 {
        let loan = publisher.loan().expect("loan");
        loan.write(0, &[i; 10]).expect("write");
        loan.publish(10).expect("publish");
    }
    let held = subscriber.receive().expect("receive");
    let c = listed(&name).expect("the channel is listed");
    let me = u64::from(std::process::id());
    assert_eq!(c["publisher_pid"], me, "{c}");
    assert_eq!(c["open"], true, "{c}");
    assert_eq!(c["mode"], "broadcast", "{c}");
    assert_eq!(c["slots"], 4, "{c}");
    assert_eq!(c["slot_size"], 4096, "{c}");
    assert_eq!(c["published"], 2, "{c}");
    // The held sample and the one not yet received.
    assert_eq!(c["slots_in_use"], 2, "{c}");
    assert_eq!(c["subscribers"], serde_json::json!([me]), "{c}");
    assert_eq!(c["remote_subscribers"], serde_json::json!([]), "{c}");
    drop(held);
    drop(subscriber);
    drop(publisher);
    assert!(listed(&name).is_none(), "a closed channel is gone");
}
