//! The devices this process sees: the simulator's profile with its
//! environment overrides, then `CUDA_VISIBLE_DEVICES` read as the driver
//! reads it.

use hal_core::kit::vendor::{cuda, Code};
use hal_mock::Profile;

/// The CUDA-like profile with `HAL_MOCK_DEVICES` / `HAL_MOCK_VISIBLE_DEVICES`
/// applied ([`Profile::with_env_overrides`]), then `CUDA_VISIBLE_DEVICES`,
/// which replaces the simulator's visible list when set. A simulator
/// variable that does not parse makes `cuInit` answer
/// `CUDA_ERROR_INVALID_VALUE`.
pub(crate) fn profile() -> Result<Profile, Code> {
    let profile = Profile::cuda()
        .with_env_overrides()
        .map_err(|_| cuda::INVALID_VALUE)?;
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(spec) => {
            let list = parse(&profile, &spec);
            profile
                .with_visible_devices(&list)
                .map_err(|_| cuda::INVALID_VALUE)
        }
        Err(_) => Ok(profile),
    }
}

/// The physical devices a `CUDA_VISIBLE_DEVICES` value names, as the
/// driver reads it: comma-separated indices or `GPU-` UUID prefixes, in
/// order; the list ends at the first entry that is not a device (an index
/// out of range, `-1`, a prefix matching no device or several, a device
/// named twice), so an empty value or `-1` hides every device.
pub(crate) fn parse(profile: &Profile, spec: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in spec.split(',').map(str::trim) {
        let found = if let Some(prefix) = entry.strip_prefix("GPU-") {
            by_uuid(profile, prefix)
        } else {
            entry.parse::<u32>().ok().filter(|&i| i < profile.devices)
        };
        match found {
            Some(p) if !out.contains(&p) => out.push(p),
            _ => break,
        }
    }
    out
}

/// The one physical device whose UUID text (`nvidia-smi -L`'s form without
/// `GPU-`) starts with `prefix`.
fn by_uuid(profile: &Profile, prefix: &str) -> Option<u32> {
    if prefix.is_empty() {
        return None;
    }
    let prefix = prefix.to_ascii_lowercase();
    let mut matches =
        (0..profile.devices).filter(|&p| uuid_text(&profile.device_uuid(p)).starts_with(&prefix));
    let first = matches.next()?;
    matches.next().is_none().then_some(first)
}

/// A UUID as 8-4-4-4-12 lower-case hex digits.
pub(crate) fn uuid_text(uuid: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, b) in uuid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_lists_as_the_driver_does() {
        let p = Profile::cuda();
        assert_eq!(parse(&p, "2,0"), vec![2, 0]);
        assert_eq!(parse(&p, ""), Vec::<u32>::new());
        assert_eq!(parse(&p, "-1"), Vec::<u32>::new());
        assert_eq!(
            parse(&p, "1,7,0"),
            vec![1],
            "stops at a device that does not exist"
        );
        assert_eq!(parse(&p, "1,1,0"), vec![1], "stops at a repeated device");
        assert_eq!(parse(&p, " 3 , 2"), vec![3, 2]);
        let uuid = uuid_text(&p.device_uuid(3));
        assert_eq!(parse(&p, &format!("GPU-{},0", &uuid[..8])), vec![3, 0]);
        assert_eq!(parse(&p, &format!("GPU-{}", uuid.to_uppercase())), vec![3]);
        assert_eq!(parse(&p, "GPU-,0"), Vec::<u32>::new());
    }
}
