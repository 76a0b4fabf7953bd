//! The private network of a partitionable [`crate::NatsCluster`]: one
//! network namespace per node, joined by a bridge in this process's
//! namespace, so that nodes can be cut from each other while clients here
//! stay connected to every node.
//!
//! ```text
//!   root namespace: tests, jetcron processes ── bridge jc<pid><k>-br 10.A.B.1/24
//!        ├── veth jc<pid><k>-v0 ══ jc<pid><k>-p0 10.A.B.2   namespace jc<pid><k>-n0 (node 0)
//!        ├── veth jc<pid><k>-v1 ══ jc<pid><k>-p1 10.A.B.3   namespace jc<pid><k>-n1 (node 1)
//!        └── …
//! ```
//!
//! A partition is drawn with iptables inside the cut node's namespace: it
//! DROPs every packet to and from the other nodes' addresses, silently, as
//! a switch that lost a link would (no RST, no ICMP), and leaves traffic with
//! the bridge's address — the clients — alone. Healing restores the empty
//! rule set; open TCP connections carry on where their retransmissions left
//! off.
//!
//! Names carry the test process's id and a per-process counter (nextest
//! runs tests in parallel, one process each), and interface names stay
//! within Linux's 15 characters. The subnet is picked from the process id,
//! skipping any that a route here already covers, under a lock file so two
//! processes never pick the same. Everything is removed on drop; leftovers
//! of a crashed run (same names, or a process that is gone) are removed
//! before building. Creating namespaces needs root (CAP_NET_ADMIN and
//! CAP_SYS_ADMIN); without it [`ClusterNetwork::create`] fails saying so.
//! Node-to-node traffic is bridged in this namespace: on a host where
//! `br_netfilter` sends bridged packets through an iptables FORWARD chain
//! that drops by default (Docker does this), the nodes cannot route and the
//! cluster never forms.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context as _};

/// Prefix of every name made here, for the sweep of leftovers.
const NAME_PREFIX: &str = "jc";

/// Serialises the choice of a subnet between test processes.
const LOCK_FILE: &str = "/tmp/jetcron-testkit-cluster-networks.lock";

/// Networks made by this process so far (the letter in the names).
static NETWORKS_MADE: AtomicU32 = AtomicU32::new(0);

/// A bridge, and a namespace with an address on it for each node.
pub(crate) struct ClusterNetwork {
    /// `jc<pid><letter>`: the start of every name of this network.
    base: String,
    /// `10.A.B` of the /24 the bridge and the nodes are on.
    subnet: [u8; 3],
    size: usize,
}

impl ClusterNetwork {
    /// Build the bridge and `size` namespaces with their veth pairs.
    pub(crate) fn create(size: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(
            (1..=200).contains(&size),
            "a cluster network holds 1 to 200 nodes, not {size}"
        );
        anyhow::ensure!(
            may_make_namespaces(),
            "a partitionable NATS cluster needs root: making network namespaces \
             takes CAP_NET_ADMIN and CAP_SYS_ADMIN, which this process lacks"
        );
        let serial = NETWORKS_MADE.fetch_add(1, Ordering::Relaxed);
        anyhow::ensure!(serial < 26, "at most 26 cluster networks per process");
        let letter = char::from(b'a' + serial as u8);
        let base = format!("{NAME_PREFIX}{}{letter}", std::process::id());

        let lock = lock_subnets()?;
        remove_leftovers_of_gone_processes();
        let subnet = free_subnet(std::process::id() * 26 + serial)?;
        // From here on, drop removes whatever was made, also on error.
        let network = Self { base, subnet, size };
        network.remove_all();
        network.build().with_context(|| {
            format!(
                "build the network of a partitionable NATS cluster ({}-*)",
                network.base
            )
        })?;
        drop(lock);
        Ok(network)
    }

    /// The namespace node `index` runs in.
    pub(crate) fn namespace(&self, index: usize) -> String {
        format!("{}-n{index}", self.base)
    }

    /// Node `index`'s address (inside its namespace, reachable from here).
    pub(crate) fn address(&self, index: usize) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(
            a,
            b,
            c,
            u8::try_from(index + 2).expect("node index fits the /24"),
        )
    }

    /// Cut node `index` from every other node, both ways; its traffic with
    /// this namespace (the clients) is untouched. Idempotent.
    pub(crate) fn isolate(&self, index: usize) -> anyhow::Result<()> {
        let peers: Vec<Ipv4Addr> = (0..self.size)
            .filter(|&other| other != index)
            .map(|other| self.address(other))
            .collect();
        self.load_filter_rules(index, &dropping(&peers))
            .with_context(|| format!("partition node {index} from its peers"))
    }

    /// Undo [`ClusterNetwork::isolate`]: accept everything again.
    pub(crate) fn reconnect(&self, index: usize) -> anyhow::Result<()> {
        self.load_filter_rules(index, &dropping(&[]))
            .with_context(|| format!("heal the partition of node {index}"))
    }

    fn bridge(&self) -> String {
        format!("{}-br", self.base)
    }

    /// The veth end in this namespace (deleting it deletes the pair).
    fn outer_veth(&self, index: usize) -> String {
        format!("{}-v{index}", self.base)
    }

    /// The veth end inside node `index`'s namespace.
    fn inner_veth(&self, index: usize) -> String {
        format!("{}-p{index}", self.base)
    }

    fn gateway(&self) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 1)
    }

    fn build(&self) -> anyhow::Result<()> {
        let bridge = self.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", self.gateway()),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        (0..self.size).try_for_each(|index| self.build_node(index))
    }

    fn build_node(&self, index: usize) -> anyhow::Result<()> {
        let (namespace, outer, inner) = (
            self.namespace(index),
            self.outer_veth(index),
            self.inner_veth(index),
        );
        let address = format!("{}/24", self.address(index));
        ip(&["netns", "add", &namespace])?;
        ip(&[
            "link", "add", &outer, "type", "veth", "peer", "name", &inner, "netns", &namespace,
        ])?;
        ip(&["link", "set", &outer, "master", &self.bridge(), "up"])?;
        ip(&["-n", &namespace, "addr", "add", &address, "dev", &inner])?;
        ip(&["-n", &namespace, "link", "set", &inner, "up"])?;
        ip(&["-n", &namespace, "link", "set", "lo", "up"])
    }

    /// Replace the filter table of node `index`'s namespace, atomically.
    fn load_filter_rules(&self, index: usize, rules: &str) -> anyhow::Result<()> {
        let namespace = self.namespace(index);
        run_with_input(
            Command::new("ip").args(["netns", "exec", &namespace, "iptables-restore"]),
            rules,
        )
        .with_context(|| format!("iptables-restore in namespace {namespace}"))
    }

    /// Delete every link and namespace of this network that exists, quietly
    /// (a leftover of a crashed run under the same names, or our own on drop).
    /// Veths go first: unlike namespaces, their deletion is synchronous.
    fn remove_all(&self) {
        for index in 0..self.size {
            let _ = ip(&["link", "del", &self.outer_veth(index)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
        for index in 0..self.size {
            let _ = ip(&["netns", "del", &self.namespace(index)]);
        }
    }
}

impl Drop for ClusterNetwork {
    fn drop(&mut self) {
        self.remove_all();
    }
}

/// Whether this process holds CAP_NET_ADMIN and CAP_SYS_ADMIN (the
/// effective set of `/proc/self/status`).
fn may_make_namespaces() -> bool {
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    [CAP_NET_ADMIN, CAP_SYS_ADMIN]
        .iter()
        .all(|&capability| effective & (1 << capability) != 0)
}

/// An `iptables-restore` filter table dropping all traffic with `peers`.
fn dropping(peers: &[Ipv4Addr]) -> String {
    let mut rules =
        String::from("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    for peer in peers {
        rules.push_str(&format!("-A INPUT -s {peer}/32 -j DROP\n"));
        rules.push_str(&format!("-A OUTPUT -d {peer}/32 -j DROP\n"));
    }
    rules.push_str("COMMIT\n");
    rules
}

/// Hold the lock file while a subnet is chosen and its bridge addressed.
fn lock_subnets() -> anyhow::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .with_context(|| format!("open {LOCK_FILE}"))?;
    file.lock().with_context(|| format!("lock {LOCK_FILE}"))?;
    Ok(file)
}

/// The first `10.A.B` from `seed` on (A in 128..=255) that no route of this
/// namespace overlaps.
fn free_subnet(seed: u32) -> anyhow::Result<[u8; 3]> {
    let routes = ip_output(&["-4", "route", "show", "table", "all"])?;
    let taken: Vec<(u32, u32)> = routes.lines().filter_map(route_prefix).collect();
    (0..32_768u32)
        .map(|step| (seed.wrapping_add(step)) % 32_768)
        .map(|slot| [10, 128 + (slot >> 8) as u8, (slot & 0xff) as u8])
        .find(|&[a, b, c]| {
            let network = u32::from(Ipv4Addr::new(a, b, c, 0));
            !taken
                .iter()
                .any(|&(net, mask)| overlaps(network, 0xffff_ff00, net, mask))
        })
        .context("no free 10.x.y.0/24 for a cluster network")
}

/// The destination of a line of `ip route show` (`[type] PREFIX …`) as
/// (network, mask), or `None` for a default route or a line without one.
fn route_prefix(line: &str) -> Option<(u32, u32)> {
    let mut words = line.split_whitespace();
    let first = words.next()?;
    let destination = if first.starts_with(|c: char| c.is_ascii_alphabetic()) && first != "default"
    {
        words.next()?
    } else {
        first
    };
    let (address, length) = match destination.split_once('/') {
        Some((address, length)) => (address, length.parse::<u32>().ok()?),
        None => (destination, 32),
    };
    let address: Ipv4Addr = address.parse().ok()?;
    let mask = if length == 0 {
        0
    } else {
        u32::MAX << (32 - length.min(32))
    };
    Some((u32::from(address) & mask, mask))
}

fn overlaps(a: u32, a_mask: u32, b: u32, b_mask: u32) -> bool {
    let common = a_mask & b_mask;
    a & common == b & common && common != 0
}

/// Delete the networks of test processes that are gone (SIGKILLed before
/// their drop ran), found by the pid in their bridge's name.
fn remove_leftovers_of_gone_processes() {
    let links = ip_output(&["-o", "link", "show"]).unwrap_or_default();
    let link_names = links
        .lines()
        .filter_map(|line| line.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name));
    for link in link_names.filter(|name| owner_is_gone(name)) {
        let _ = ip(&["link", "del", link]);
    }
    let namespaces = ip_output(&["netns", "list"]).unwrap_or_default();
    let namespace_names = namespaces
        .lines()
        .filter_map(|l| l.split_whitespace().next());
    for namespace in namespace_names.filter(|name| owner_is_gone(name)) {
        let _ = ip(&["netns", "del", namespace]);
    }
}

fn owner_is_gone(name: &str) -> bool {
    owner_pid(name).is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
}

/// The pid in a name made here (`jc<pid><letter>-…`), if it is one.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let (head, role) = rest.split_once('-')?;
    let digits = head.strip_suffix(|c: char| c.is_ascii_lowercase())?;
    let known_role = ["br", "v", "p", "n"].iter().any(|r| {
        role.strip_prefix(r)
            .is_some_and(|i| i.chars().all(|c| c.is_ascii_digit()))
    });
    if !known_role || digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Run `ip args…`, failing with its stderr.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    ip_output(args).map(drop)
}

fn ip_output(args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("run `ip` (iproute2)")?;
    if !output.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn run_with_input(command: &mut Command, input: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawn")?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(input.as_bytes())
        .context("write rules")?;
    let output = child.wait_with_output().context("wait")?;
    if !output.status.success() {
        bail!("{}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_made_here_name_their_owner() {
        assert_eq!(owner_pid("jc4194304a-br"), Some(4_194_304));
        assert_eq!(owner_pid("jc123b-v0"), Some(123));
        assert_eq!(owner_pid("jc123b-n12"), Some(123));
        assert_eq!(owner_pid("jc123-br"), None);
        assert_eq!(owner_pid("jcx-br"), None);
        assert_eq!(owner_pid("eth0"), None);
        assert!("jc4194304z-v199".len() <= 15);
    }

    #[test]
    fn routes_are_read_as_prefixes() {
        assert_eq!(route_prefix("default via 192.0.2.1 dev eth0"), None);
        let (net, mask) = route_prefix("10.128.5.0/24 dev jc1a-br proto kernel").expect("a prefix");
        assert_eq!(
            (net, mask),
            (u32::from(Ipv4Addr::new(10, 128, 5, 0)), 0xffff_ff00)
        );
        assert_eq!(route_prefix("unreachable default dev lo"), None);
        let (net, mask) =
            route_prefix("local 10.128.5.1 dev jc1a-br table local").expect("an address");
        assert_eq!(
            (net, mask),
            (u32::from(Ipv4Addr::new(10, 128, 5, 1)), u32::MAX)
        );
        let wide = route_prefix("10.0.0.0/8 dev eth1").expect("a prefix");
        assert!(overlaps(net & 0xffff_ff00, 0xffff_ff00, wide.0, wide.1));
        assert!(!overlaps(
            u32::from(Ipv4Addr::new(11, 0, 0, 0)),
            0xffff_ff00,
            wide.0,
            wide.1
        ));
    }
}
