//! Connection slots shared fairly between peers. A peer (an IPv4 address,
//! an IPv6 /64) holds at most `per_peer` connections, all peers together at
//! most `total`. A newcomer that finds no free slot takes an idle one:
//! first one that got nowhere (no TLS handshake done, no request yet), the
//! longest idle of them, from anyone; failing that, one past its handshake
//! or between keep-alive requests, but only from a peer holding more than
//! the newcomer's peer does. A connection serving a request is never taken.
//! So idlers cannot keep a scraper out, however many of them there are or
//! however fast they reconnect, and a scraper's keep-alive connections
//! outlive them. A peer whose connection that got nowhere was taken may not
//! take one itself for a while (1 s, doubling with each such loss up to
//! 30 s, forgotten once one of its connections carries a request): idlers
//! reconnecting at once would otherwise churn the slots so fast that a
//! newcomer's TLS handshake could not finish before it too was the oldest
//! idle connection.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use tokio::sync::oneshot;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Peer(u128);

impl Peer {
    pub(crate) fn of(ip: IpAddr) -> Peer {
        match ip {
            IpAddr::V4(v4) => Peer(u32::from(v4) as u128),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Peer(u32::from(v4) as u128),
                // One host usually holds a whole /64.
                None => Peer((u128::from(v6) >> 64 << 64) | 1 << 32),
            },
        }
    }
}

/// How long a peer whose connection that got nowhere was taken may not take
/// another's slot: the first time; it doubles each time up to the maximum.
const COOLDOWN: Duration = Duration::from_secs(1);
const COOLDOWN_MAX: Duration = Duration::from_secs(30);
/// A peer's losses are forgotten this long after its cooldown ended.
const FORGET: Duration = Duration::from_secs(60);

struct Cooling {
    until: Instant,
    /// Connections that got nowhere taken from it.
    losses: u32,
}

/// How far a connection got; the lower, the sooner it is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stage {
    Connected,
    Handshaken,
    Served,
}

struct Conn {
    peer: Peer,
    stage: Stage,
    /// When it last became idle (or connected); None while serving.
    idle_since: Option<Instant>,
    /// When it started serving its current request.
    busy_since: Option<Instant>,
    evict: Option<oneshot::Sender<()>>,
}

struct State {
    next: u64,
    conns: HashMap<u64, Conn>,
    per_peer: HashMap<Peer, usize>,
    /// Peers in their cooldown, and since when.
    cooling: HashMap<Peer, Cooling>,
    pruned: Instant,
}

pub(crate) struct Slots {
    total: usize,
    per_peer: usize,
    state: Mutex<State>,
}

/// A held slot; dropping it frees the slot.
pub(crate) struct Ticket {
    slots: Arc<Slots>,
    id: u64,
}

impl Slots {
    pub(crate) fn new(total: usize, per_peer: usize) -> Arc<Slots> {
        Arc::new(Slots {
            total,
            per_peer,
            state: Mutex::new(State {
                next: 0,
                conns: HashMap::new(),
                per_peer: HashMap::new(),
                cooling: HashMap::new(),
                pruned: Instant::now(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a new connection from `peer`, taking an idle one if need
    /// be, and what fires if a newcomer takes it; None if the connection
    /// must be refused.
    pub(crate) fn admit(self: &Arc<Self>, peer: Peer) -> Option<(Ticket, oneshot::Receiver<()>)> {
        let mut st = self.lock();
        let now = Instant::now();
        if now.duration_since(st.pruned) >= COOLDOWN {
            st.pruned = now;
            st.cooling.retain(|_, c| now < c.until + FORGET);
        }
        let mine = st.per_peer.get(&peer).copied().unwrap_or(0);
        // The least advanced first, then the longest idle. Not the
        // most-holding peer's first: a scraper holding a keep-alive
        // connection per job would lose its new ones to every idler.
        let order = |c: &Conn| Some((c.stage, c.idle_since?));
        let victim = if mine >= self.per_peer {
            // At its own limit: its own idle connection makes room.
            st.conns
                .iter()
                .filter(|(_, c)| c.peer == peer)
                .filter_map(|(id, c)| Some((order(c)?, *id)))
                .min()
                .map(|(_, id)| Some(id))
        } else if st.conns.len() >= self.total {
            if st.cooling.get(&peer).is_some_and(|c| now < c.until) {
                None
            } else {
                // Full: an idle connection that got nowhere, or one of a
                // peer holding more than `peer` (a scraper already holding
                // a connection per job must still get a new one in).
                st.conns
                    .iter()
                    .filter_map(|(id, c)| {
                        let n = st.per_peer[&c.peer];
                        (c.stage == Stage::Connected || n > mine).then(|| Some((order(c)?, *id)))?
                    })
                    .min()
                    .map(|(_, id)| Some(id))
            }
        } else {
            Some(None)
        };
        let victim = victim?;
        if let Some(id) = victim {
            let c = st.conns.remove(&id).expect("victim is open");
            Self::forget(&mut st, c.peer);
            if c.stage == Stage::Connected && c.peer != peer {
                let cool = st.cooling.entry(c.peer).or_insert(Cooling {
                    until: now,
                    losses: 0,
                });
                cool.losses += 1;
                cool.until =
                    now + (COOLDOWN * 2u32.saturating_pow(cool.losses - 1)).min(COOLDOWN_MAX);
            }
            if let Some(tx) = c.evict {
                let _ = tx.send(());
            }
        }
        let (tx, rx) = oneshot::channel();
        let id = st.next;
        st.next += 1;
        st.conns.insert(
            id,
            Conn {
                peer,
                stage: Stage::Connected,
                idle_since: Some(now),
                busy_since: None,
                evict: Some(tx),
            },
        );
        *st.per_peer.entry(peer).or_default() += 1;
        Some((
            Ticket {
                slots: self.clone(),
                id,
            },
            rx,
        ))
    }

    fn forget(st: &mut State, peer: Peer) {
        if let Some(n) = st.per_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                st.per_peer.remove(&peer);
            }
        }
    }

    /// Connections open now (for tests).
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.lock().conns.len()
    }
}

impl Ticket {
    /// A request arrived (busy) or its response is done (idle).
    pub(crate) fn set_busy(&self, busy: bool) {
        let mut st = self.slots.lock();
        let Some(c) = st.conns.get_mut(&self.id) else {
            return;
        };
        let now = Instant::now();
        c.idle_since = (!busy).then_some(now);
        c.busy_since = busy.then_some(now);
        if busy {
            c.stage = Stage::Served;
            // A real client: its peer's losses are forgiven.
            let peer = c.peer;
            st.cooling.remove(&peer);
        }
    }

    /// The TLS handshake is done.
    pub(crate) fn handshaken(&self) {
        let mut st = self.slots.lock();
        if let Some(c) = st.conns.get_mut(&self.id) {
            c.stage = c.stage.max(Stage::Handshaken);
        }
    }

    /// How long the current request has been served, if one is.
    pub(crate) fn busy_for(&self) -> Option<Duration> {
        let st = self.slots.lock();
        st.conns.get(&self.id)?.busy_since.map(|t| t.elapsed())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.slots.lock();
        if let Some(c) = st.conns.remove(&self.id) {
            Slots::forget(&mut st, c.peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Peer {
        Peer::of(s.parse().unwrap())
    }

    #[test]
    fn per_peer_limit_takes_the_peers_own_oldest_idle() {
        let s = Slots::new(10, 2);
        let (_a1, mut a1_gone) = s.admit(ip("10.0.0.1")).unwrap();
        let (a2, mut a2_gone) = s.admit(ip("10.0.0.1")).unwrap();
        a2.set_busy(true);
        let (_b, mut b_gone) = s.admit(ip("10.0.0.2")).unwrap();
        // Third from the same peer: its idle a1 goes, not b.
        let (a3, _) = s.admit(ip("10.0.0.1")).unwrap();
        assert!(a1_gone.try_recv().is_ok());
        assert!(a2_gone.try_recv().is_err());
        assert!(b_gone.try_recv().is_err());
        assert_eq!(s.open(), 3);
        // Both of its connections busy: refused.
        a3.set_busy(true);
        assert!(s.admit(ip("10.0.0.1")).is_none());
    }

    #[test]
    fn full_takes_from_a_peer_holding_more_and_never_a_busy_one() {
        let s = Slots::new(4, 4);
        // Past their handshakes, waiting for requests.
        let mut nine: Vec<_> = (0..3).map(|_| s.admit(ip("10.0.0.9")).unwrap()).collect();
        let (eight, mut eight_gone) = s.admit(ip("10.0.0.8")).unwrap();
        for t in nine.iter().map(|n| &n.0).chain([&eight]) {
            t.handshaken();
        }
        // Full: .1 (holding none) takes the longest idle connection (.9's).
        let (one, _) = s.admit(ip("10.0.0.1")).unwrap();
        one.handshaken();
        assert!(nine[0].1.try_recv().is_ok());
        assert!(nine[1].1.try_recv().is_err());
        assert_eq!(s.open(), 4);
        // .9 holds 2, more than .1's 1: .1 may take another of .9's, not a
        // busy one.
        nine[1].0.set_busy(true);
        let (one_b, _) = s.admit(ip("10.0.0.1")).unwrap();
        one_b.handshaken();
        assert!(nine[1].1.try_recv().is_err(), "busy, so not taken");
        assert!(nine[2].1.try_recv().is_ok());
        // .8 holds 1, .9 1, .1 2 (busy): nothing .8 may take.
        one.set_busy(true);
        one_b.set_busy(true);
        assert!(s.admit(ip("10.0.0.8")).is_none());
        assert!(eight_gone.try_recv().is_err());
        // A newcomer holding nothing takes .8's idle one.
        let (_new, mut new_gone) = s.admit(ip("10.0.0.5")).unwrap();
        assert!(eight_gone.try_recv().is_ok());
        assert_eq!(s.open(), 4);
        // One that got nowhere is anyone's to take, even for .1 holding 2.
        let (_again, _) = s
            .admit(ip("10.0.0.1"))
            .unwrap_or_else(|| panic!("a peer at 2 of 4 may take a connection that got nowhere"));
        assert!(new_gone.try_recv().is_ok());
    }

    #[test]
    fn used_connections_outlive_idlers_and_evicted_idlers_cool_down() {
        let s = Slots::new(3, 4);
        // A scraper's keep-alive connection: served once, idle now.
        let (scraper, mut scraper_gone) = s.admit(ip("10.0.0.1")).unwrap();
        scraper.set_busy(true);
        scraper.set_busy(false);
        let (_i2, mut i2_gone) = s.admit(ip("10.0.0.2")).unwrap();
        let (_i3, mut i3_gone) = s.admit(ip("10.0.0.3")).unwrap();
        // Past its handshake, .3 outlives .2.
        _i3.handshaken();
        // Full: the never-used .2 goes, although the scraper's is older.
        let (_i4, _) = s.admit(ip("10.0.0.4")).unwrap();
        assert!(i2_gone.try_recv().is_ok());
        assert!(scraper_gone.try_recv().is_err());
        // .2 is cooling: it cannot take a slot back at once.
        assert!(s.admit(ip("10.0.0.2")).is_none());
        // Another newcomer can: .4's, which got nowhere, goes, not .3's.
        let (i5, _) = s.admit(ip("10.0.0.5")).unwrap();
        assert!(i3_gone.try_recv().is_err());
        // With .5 serving, .3's goes before the scraper's.
        i5.set_busy(true);
        let (_i6, _) = s.admit(ip("10.0.0.6")).unwrap();
        assert!(i3_gone.try_recv().is_ok());
        assert!(scraper_gone.try_recv().is_err());
    }

    #[test]
    fn cooldown_doubles_and_a_served_request_forgives() {
        let s = Slots::new(1, 4);
        let idler = ip("10.0.0.2");
        let taken = |s: &Arc<Slots>| s.lock().cooling.get(&idler).map(|c| c.losses);
        let (held, _) = s.admit(idler).unwrap();
        let (_x, _) = s.admit(ip("10.0.0.3")).unwrap();
        drop(held);
        assert_eq!(taken(&s), Some(1));
        let until = s.lock().cooling[&idler].until;
        // Once its cooldown is over, another loss costs it 2 s.
        s.lock().cooling.get_mut(&idler).unwrap().until = Instant::now();
        let (held, _) = s.admit(idler).unwrap();
        let (_y, _) = s.admit(ip("10.0.0.4")).unwrap();
        drop(held);
        {
            let st = s.lock();
            let c = &st.cooling[&idler];
            assert_eq!(c.losses, 2);
            assert!(c.until - Instant::now() > Duration::from_millis(1500));
            assert!(until <= c.until);
        }
        drop(_x);
        // A request served forgives.
        s.lock().cooling.get_mut(&idler).unwrap().until = Instant::now();
        drop(_y);
        let (t, _) = s.admit(idler).unwrap();
        t.set_busy(true);
        assert_eq!(taken(&s), None);
    }

    #[test]
    fn ipv6_peers_are_slash_64s_and_mapped_v4_is_v4() {
        assert_eq!(ip("2001:db8::1"), ip("2001:db8::ffff:2"));
        assert_ne!(ip("2001:db8::1"), ip("2001:db8:0:1::1"));
        assert_eq!(ip("::ffff:10.0.0.1"), ip("10.0.0.1"));
        assert_ne!(ip("0.0.0.1"), ip("::1:0:0:0:1"));
    }
}
