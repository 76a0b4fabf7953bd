//! The executor's call slots (`--max-in-flight`), shared among namespaces
//! so that none starves another.
//!
//! A slot is held while a target is called. Taken first come first served
//! (a FIFO semaphore, as before), one team's 5,000 fires at one instant on
//! a target that takes 2 s held every slot for 2 s, then the next 2,048,
//! and another team's every-second job waited behind all of them: 3-4 s
//! late (docs/benchmarks.md, "Fair share"). Here:
//!
//! - **The reserve.** A namespace takes a free slot when more than
//!   `reserve` are free, or when it holds fewer slots than are free. So one
//!   busy namespace leaves `reserve` slots free, a second takes about half of
//!   them, a third half of what is left, and a namespace holding none takes
//!   the last free slot: a team with nothing running finds a slot at its
//!   fire's instant while another team saturates the executor.
//! - **Turns.** Fires that find no slot wait in their namespace's queue
//!   (first come first served within it); a freed slot goes to the
//!   namespaces that wait in turn, each taking one, skipping those the
//!   reserve keeps out.
//!
//! `Sharing::Fifo` keeps the old behaviour (one queue, no reserve) for a
//! single-team deployment that wants every slot, and for the benchmark
//! that measures the difference side by side.
//!
//! Pure bookkeeping behind a mutex, no I/O: a waiter gets its slot through
//! a oneshot, and a waiter that is dropped (a lease lost, a shutdown) gives
//! back a slot granted to it meanwhile or leaves its queue.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{oneshot, OwnedSemaphorePermit};

/// How the slots are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sharing {
    /// Per namespace, in turns, with a reserve.
    #[default]
    Fair,
    /// One queue, first come first served, every slot to whoever comes.
    Fifo,
}

impl std::str::FromStr for Sharing {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fair" => Ok(Self::Fair),
            "fifo" => Ok(Self::Fifo),
            other => Err(format!("`{other}` is no slot sharing: fair or fifo")),
        }
    }
}

/// The reserve when none is given: an eighth of the slots, none below 16
/// (where a slot or two kept idle would be much of the executor).
pub fn default_reserve(capacity: usize) -> usize {
    if capacity < 16 {
        0
    } else {
        capacity / 8
    }
}

/// The call slots of one executor.
pub struct FairSlots {
    state: Mutex<State>,
    reserve: usize,
    sharing: Sharing,
}

struct State {
    free: usize,
    /// Slots held, per queue key (the namespace; one key for `Fifo`).
    held: HashMap<Arc<str>, usize>,
    /// Waiters per key, first come first served.
    queues: HashMap<Arc<str>, VecDeque<Waiter>>,
    /// The keys with waiters, in the order of their turns.
    turns: VecDeque<Arc<str>>,
    next_ticket: u64,
}

struct Waiter {
    ticket: u64,
    granted: oneshot::Sender<()>,
}

/// A slot held; given back when dropped.
pub struct SlotPermit {
    slots: Arc<FairSlots>,
    key: Arc<str>,
    /// The pull loop's intake permit of the fire, given back with the slot.
    intake: Option<OwnedSemaphorePermit>,
}

impl SlotPermit {
    /// This slot, also holding the fire's intake permit (if it has one)
    /// until it is given back.
    pub fn with_intake(mut self, intake: Option<OwnedSemaphorePermit>) -> Self {
        self.intake = intake;
        self
    }
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        self.slots.give_back(&self.key);
    }
}

/// The key every fire queues under with `Sharing::Fifo`.
const ONE_QUEUE: &str = "";

impl FairSlots {
    /// `capacity` slots shared as `sharing` says, keeping `reserve` of them
    /// (for `Fair`) for namespaces that hold fewer than are free.
    pub fn new(capacity: usize, reserve: usize, sharing: Sharing) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                free: capacity,
                held: HashMap::new(),
                queues: HashMap::new(),
                turns: VecDeque::new(),
                next_ticket: 0,
            }),
            reserve,
            sharing,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned lock's state is whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn key_of<'a>(&self, namespace: &'a str) -> &'a str {
        match self.sharing {
            Sharing::Fair => namespace,
            Sharing::Fifo => ONE_QUEUE,
        }
    }

    /// Whether a key holding `held` slots may take one of `free`.
    fn may_take(&self, held: usize, free: usize) -> bool {
        match self.sharing {
            Sharing::Fifo => free > 0,
            Sharing::Fair => free > 0 && (free > self.reserve || held < free),
        }
    }

    /// A slot for a fire of `namespace` now, if the rules give it one and no
    /// fire of its namespace waits ahead of it.
    pub fn try_take(self: &Arc<Self>, namespace: &str) -> Option<SlotPermit> {
        let key = self.key_of(namespace);
        let taken = self.take_now(&mut self.lock(), key)?;
        Some(self.permit(taken))
    }

    /// A slot counted as taken under `key`, if the rules give one now and
    /// no fire of its key waits; the key as stored.
    fn take_now(&self, state: &mut State, key: &str) -> Option<Arc<str>> {
        if state.queues.contains_key(key) {
            return None;
        }
        let held = state.held.get(key).copied().unwrap_or(0);
        self.may_take(held, state.free)
            .then(|| state.count_taken(key))
    }

    /// A slot for a fire of `namespace`, waiting in its namespace's queue
    /// for its turn. Dropped while it waits, it leaves the queue (or gives
    /// back the slot granted meanwhile).
    pub async fn take(self: &Arc<Self>, namespace: &str) -> SlotPermit {
        let (key, ticket, granted) = {
            let key = self.key_of(namespace);
            let mut state = self.lock();
            if let Some(taken) = self.take_now(&mut state, key) {
                drop(state);
                return self.permit(taken);
            }
            state.enqueue(key)
        };
        let mut waiting = Waiting {
            slots: self,
            key: key.clone(),
            ticket,
            granted: Some(granted),
        };
        if let Some(granted) = waiting.granted.as_mut() {
            // The sender is dropped only after a send or by `leave`, which
            // only this waiter calls: a closed channel means a grant.
            let _ = granted.await;
        }
        waiting.granted = None;
        self.permit(key)
    }

    fn permit(self: &Arc<Self>, key: Arc<str>) -> SlotPermit {
        SlotPermit {
            slots: self.clone(),
            key,
            intake: None,
        }
    }

    fn give_back(&self, key: &str) {
        let mut state = self.lock();
        state.count_given_back(key);
        self.hand_out(&mut state);
    }

    /// Grant free slots to the waiters the rules let take one, a key at a
    /// time in turn, until none is free or no waiting key may take one.
    fn hand_out(&self, state: &mut State) {
        let mut passed = 0;
        while state.free > 0 && passed < state.turns.len() {
            let Some(key) = state.turns.pop_front() else {
                break;
            };
            let held = state.held.get(&key).copied().unwrap_or(0);
            if !self.may_take(held, state.free) {
                state.turns.push_back(key);
                passed += 1;
                continue;
            }
            passed = 0;
            let Some(queue) = state.queues.get_mut(&key) else {
                continue;
            };
            let waiter = queue.pop_front();
            let more = !queue.is_empty();
            if more {
                state.turns.push_back(key.clone());
            } else {
                state.queues.remove(&key);
            }
            if let Some(waiter) = waiter {
                state.count_taken(&key);
                if waiter.granted.send(()).is_err() {
                    // Its waiter is gone (it leaves the queue itself when
                    // dropped; this is the race with that).
                    state.count_given_back(&key);
                }
            }
        }
    }

    /// A waiter dropped before its grant was read: out of its queue, or its
    /// slot given back when the grant came meanwhile.
    fn leave(&self, key: &Arc<str>, ticket: u64, mut granted: oneshot::Receiver<()>) {
        let mut state = self.lock();
        granted.close();
        if granted.try_recv().is_ok() {
            drop(state);
            self.give_back(key);
            return;
        }
        if let Some(queue) = state.queues.get_mut(key) {
            queue.retain(|w| w.ticket != ticket);
            if queue.is_empty() {
                state.queues.remove(key);
                state.turns.retain(|k| k != key);
            }
        }
    }

    /// Slots free now and fires waiting for one (for metrics and tests).
    pub fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        let waiting = state.queues.values().map(VecDeque::len).sum();
        (state.free, waiting)
    }
}

impl State {
    /// One slot more held under `key`; the key as stored.
    fn count_taken(&mut self, key: &str) -> Arc<str> {
        self.free -= 1;
        match self.held.get_key_value(key) {
            Some((stored, _)) => {
                let stored = stored.clone();
                *self.held.get_mut(key).expect("just found") += 1;
                stored
            }
            None => {
                let stored: Arc<str> = Arc::from(key);
                self.held.insert(stored.clone(), 1);
                stored
            }
        }
    }

    fn count_given_back(&mut self, key: &str) {
        self.free += 1;
        if let Some(held) = self.held.get_mut(key) {
            *held -= 1;
            if *held == 0 {
                self.held.remove(key);
            }
        }
    }

    fn enqueue(&mut self, key: &str) -> (Arc<str>, u64, oneshot::Receiver<()>) {
        let key: Arc<str> = match self.queues.get_key_value(key) {
            Some((stored, _)) => stored.clone(),
            None => {
                let stored: Arc<str> = Arc::from(key);
                self.queues.insert(stored.clone(), VecDeque::new());
                self.turns.push_back(stored.clone());
                stored
            }
        };
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let (sender, receiver) = oneshot::channel();
        self.queues
            .get_mut(&key)
            .expect("just inserted")
            .push_back(Waiter {
                ticket,
                granted: sender,
            });
        (key, ticket, receiver)
    }
}

/// A waiter in a queue, leaving it when dropped before its grant was read.
struct Waiting<'a> {
    slots: &'a FairSlots,
    key: Arc<str>,
    ticket: u64,
    granted: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(granted) = self.granted.take() {
            self.slots.leave(&self.key, self.ticket, granted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn held(permits: &[SlotPermit], key: &str) -> usize {
        permits.iter().filter(|p| &*p.key == key).count()
    }

    #[test]
    fn a_busy_namespace_leaves_the_reserve_and_a_namespace_holding_none_takes_the_last_slot() {
        let slots = FairSlots::new(16, 2, Sharing::Fair);
        let mut taken = Vec::new();
        while let Some(p) = slots.try_take("bulk") {
            taken.push(p);
        }
        assert_eq!(held(&taken, "bulk"), 14, "the reserve of 2 is left");
        let light = slots.try_take("light").expect("a namespace holding none");
        assert!(
            slots.try_take("light").is_none(),
            "holding 1 of 1 free: no more"
        );
        let other = slots.try_take("other").expect("the last slot");
        assert!(slots.try_take("third").is_none(), "none free");
        drop((light, other));
        assert_eq!(slots.counts(), (2, 0));
    }

    #[test]
    fn a_second_busy_namespace_takes_about_half_of_the_reserve() {
        let slots = FairSlots::new(64, 8, Sharing::Fair);
        let mut taken = Vec::new();
        while let Some(p) = slots.try_take("a") {
            taken.push(p);
        }
        while let Some(p) = slots.try_take("b") {
            taken.push(p);
        }
        assert_eq!(held(&taken, "a"), 56);
        assert_eq!(held(&taken, "b"), 4);
        assert_eq!(slots.counts().0, 4);
        assert!(slots.try_take("c").is_some());
    }

    #[test]
    fn fifo_gives_every_slot_to_whoever_comes() {
        let slots = FairSlots::new(16, 2, Sharing::Fifo);
        let taken: Vec<_> = std::iter::from_fn(|| slots.try_take("bulk")).collect();
        assert_eq!(taken.len(), 16);
        assert!(slots.try_take("light").is_none());
    }

    #[tokio::test]
    async fn freed_slots_go_to_the_waiting_namespaces_in_turn() {
        let slots = FairSlots::new(4, 0, Sharing::Fair);
        let mut held_now: VecDeque<_> = (0..4).filter_map(|_| slots.try_take("a")).collect();
        assert_eq!(held_now.len(), 4);
        // Three more of `a` wait, then two of `b`.
        let (sender, mut order) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for (i, ns) in ["a", "a", "a", "b", "b"].into_iter().enumerate() {
            let (slots, sender) = (slots.clone(), sender.clone());
            waiters.push(tokio::spawn(async move {
                let permit = slots.take(ns).await;
                sender.send(format!("{ns}{i}")).expect("test value");
                tokio::time::sleep(Duration::from_secs(3600)).await;
                drop(permit);
            }));
            tokio::task::yield_now().await;
        }
        assert_eq!(slots.counts(), (0, 5));
        for _ in 0..3 {
            held_now.pop_front();
        }
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(order.recv().await.expect("test value"));
        }
        // Turns: a, b, a (the queue order within each namespace kept).
        assert_eq!(got, ["a0", "b3", "a1"]);
        for w in waiters {
            w.abort();
        }
    }

    #[tokio::test]
    async fn a_waiter_dropped_leaves_its_queue_and_a_dropped_grant_comes_back() {
        let slots = FairSlots::new(1, 0, Sharing::Fair);
        let only = slots.try_take("a").expect("test value");
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take("b").await }
        });
        tokio::task::yield_now().await;
        assert_eq!(slots.counts(), (0, 1));
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(slots.counts(), (0, 0), "left its queue");
        drop(only);
        assert_eq!(slots.counts(), (1, 0));

        // Granted but never read: the slot comes back when it is dropped.
        let only = slots.try_take("a").expect("test value");
        let slots2 = slots.clone();
        let mut future = Box::pin(async move { slots2.take("b").await });
        assert!(futures::poll!(future.as_mut()).is_pending());
        drop(only);
        drop(future);
        assert_eq!(slots.counts(), (1, 0));
    }

    #[test]
    fn the_default_reserve_is_an_eighth_and_none_for_a_few_slots() {
        assert_eq!(default_reserve(2048), 256);
        assert_eq!(default_reserve(16), 2);
        assert_eq!(default_reserve(15), 0);
        assert_eq!(default_reserve(1), 0);
    }
}
