//! The resource forest: one node per live resource name, per namespace, with its holders and
//! its FIFO queue, linked to its parent so overlap (docs/SPEC.md §3) is a walk, not a scan.
//!
//! Contract:
//! - A node exists while it, or something below it, has a holder or a queued intent, or while
//!   it is among the [`RETIRED_NODES`] most recently emptied: the kernel calls
//!   [`Tree::retire`] on nodes it emptied, which keeps them interned (a name asked for again
//!   soon, a hot file, finds its node and ancestors instead of rebuilding them) and prunes the
//!   oldest beyond that bound, so memory follows the live state. An empty node is invisible:
//!   it holds nothing, queues nothing, counts nothing below it, and every walk skips it.
//! - Every node keeps counts of the entries strictly below it, so a walk over descendants
//!   only enters subtrees that hold something of the wanted kind: the cost of a request
//!   depends on what overlaps it, never on the number of unrelated leases.
//! - Interning a name interns its ancestors too (`FILE:/a/b` needs `FILE:/a` and `FILE:/`).
//! - The buffers of pruned nodes (name, children and queue) are kept in small bounded pools and
//!   reused by the next nodes interned, so acquiring and releasing a resource that has no node
//!   yet does not go to the allocator (issue 15); the pools hold at most [`SPARE_BUFFERS`]
//!   each, so memory still follows the live state.

use crate::predicate::Predicate;
use crate::resource::parent_of;
use crate::types::{LeaseId, SessionId, TicketId};
use alloc::{boxed::Box, collections::VecDeque, string::String, vec::Vec};
use core::hash::BuildHasher;
use core::ops::ControlFlow;
use foldhash::fast::FixedState;
use hashbrown::HashTable;
use smallvec::SmallVec;

/// Index of a node in the arena.
pub(crate) type NodeId = u32;
/// Index of an interned namespace.
pub(crate) type NamespaceId = u32;

/// A lease held on a node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeldEntry {
    pub lease: LeaseId,
    pub session: SessionId,
    pub predicate: Predicate,
}

/// An intent of a waiting ticket queued on a node; queues are sorted by ticket number.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueuedEntry {
    pub ticket: TicketId,
    pub session: SessionId,
    pub predicate: Predicate,
}

#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub namespace: NamespaceId,
    /// Canonical `TYPE:/path`. A `String`, not a `Box<str>`, so that a pruned node's buffer
    /// can name the next node interned (8 bytes more per node).
    pub name: String,
    pub parent: Option<NodeId>,
    /// Position in the parent's `children`, for O(1) unlinking.
    slot_in_parent: u32,
    /// Usually one holder: kept inline so a leased leaf costs no extra allocation.
    pub held: SmallVec<[HeldEntry; 1]>,
    /// Children and queue, boxed because most nodes are leaves nobody waits for: a leased
    /// leaf then pays one pointer instead of two empty vectors.
    branches: Option<Box<Branches>>,
    /// Held entries strictly below this node.
    pub held_below: u32,
    /// Queued entries strictly below this node.
    pub queued_below: u32,
}

#[derive(Clone, Debug, Default)]
struct Branches {
    children: Vec<NodeId>,
    queued: Vec<QueuedEntry>,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.held.is_empty() && self.branches.is_none()
    }

    /// Live child nodes, in no particular order.
    pub fn children(&self) -> &[NodeId] {
        self.branches.as_ref().map_or(&[], |b| &b.children)
    }

    /// Queued intents, by ticket number.
    pub fn queued(&self) -> &[QueuedEntry] {
        self.branches.as_ref().map_or(&[], |b| &b.queued)
    }

    fn branches_mut(&mut self, spare: &mut Spare) -> &mut Branches {
        self.branches
            .get_or_insert_with(|| spare.branches.pop().unwrap_or_default())
    }

    /// Detaches the branches once both are empty, keeping their buffers for reuse.
    fn shrink_branches(&mut self, spare: &mut Spare) {
        if self
            .branches
            .as_ref()
            .is_some_and(|b| b.children.is_empty() && b.queued.is_empty())
        {
            let branches = self.branches.take().expect("checked present");
            if spare.branches.len() < SPARE_BUFFERS {
                spare.branches.push(branches);
            }
        }
    }
}

/// How many buffers of pruned nodes each pool keeps: enough for the nodes a few operations
/// create and free (a path and its ancestors), small enough not to matter.
pub(crate) const SPARE_BUFFERS: usize = 16;

/// Buffers of pruned nodes, reused by the next nodes interned (empty, capacity kept).
#[derive(Clone, Default)]
struct Spare {
    names: Vec<String>,
    // The boxes are what is reused: a node holds its branches boxed.
    #[allow(clippy::vec_box)]
    branches: Vec<Box<Branches>>,
}

/// Which kinds of entries a walk is looking for (prunes the descent into subtrees).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Want {
    pub held: bool,
    pub queued: bool,
}

impl Want {
    pub const HELD: Want = Want {
        held: true,
        queued: false,
    };
    pub const QUEUED: Want = Want {
        held: false,
        queued: true,
    };
    pub const BOTH: Want = Want {
        held: true,
        queued: true,
    };

    fn enters(self, node: &Node) -> bool {
        (self.held && (!node.held.is_empty() || node.held_below > 0))
            || (self.queued && (!node.queued().is_empty() || node.queued_below > 0))
    }
}

/// How a visited node relates to the node a walk started from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Relation {
    Same,
    Ancestor,
    Descendant,
}

#[derive(Clone, Default)]
pub(crate) struct Tree {
    nodes: Vec<Option<Node>>,
    free: Vec<NodeId>,
    index: HashTable<NodeId>,
    hasher: FixedState,
    spare: Spare,
    /// Emptied nodes kept interned, oldest first (an id may repeat, or name a node refilled
    /// or pruned since: pruning re-checks).
    retired: VecDeque<NodeId>,
}

/// How many emptied nodes stay interned (see the module contract).
pub(crate) const RETIRED_NODES: usize = 64;

fn key_hash(hasher: &FixedState, namespace: NamespaceId, name: &str) -> u64 {
    hasher.hash_one((namespace, name))
}

impl Tree {
    pub fn node(&self, id: NodeId) -> &Node {
        self.nodes[id as usize].as_ref().expect("live node id")
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.nodes[id as usize].as_mut().expect("live node id")
    }

    /// Number of live nodes.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// The node named `name` (canonical) in `namespace`, if it is live.
    pub fn find(&self, namespace: NamespaceId, name: &str) -> Option<NodeId> {
        self.find_hashed(key_hash(&self.hasher, namespace, name), namespace, name)
    }

    fn find_hashed(&self, hash: u64, namespace: NamespaceId, name: &str) -> Option<NodeId> {
        let nodes = &self.nodes;
        self.index
            .find(hash, |&id| {
                let n = nodes[id as usize].as_ref().expect("indexed node is live");
                n.namespace == namespace && &*n.name == name
            })
            .copied()
    }

    /// The node named `name` (canonical), created with its missing ancestors.
    pub fn intern(&mut self, namespace: NamespaceId, name: &str) -> NodeId {
        // Hashed once: the lookup and the insertion of a new node share it.
        let hash = key_hash(&self.hasher, namespace, name);
        if let Some(id) = self.find_hashed(hash, namespace, name) {
            return id;
        }
        let parent = parent_of(name).map(|p| self.intern(namespace, p));
        let mut buffer = self.spare.names.pop().unwrap_or_default();
        buffer.push_str(name);
        let node = Node {
            namespace,
            name: buffer,
            parent,
            slot_in_parent: 0,
            held: SmallVec::new(),
            branches: None,
            held_below: 0,
            queued_below: 0,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                NodeId::try_from(self.nodes.len() - 1).expect("fewer than 2^32 live resource nodes")
            }
        };
        if let Some(p) = parent {
            let node = self.nodes[p as usize].as_mut().expect("live node id");
            let siblings = &mut node.branches_mut(&mut self.spare).children;
            let slot = siblings.len() as u32;
            siblings.push(id);
            self.node_mut(id).slot_in_parent = slot;
        }
        let (nodes, hasher) = (&self.nodes, &self.hasher);
        self.index.insert_unique(hash, id, |&other| {
            let n = nodes[other as usize]
                .as_ref()
                .expect("indexed node is live");
            key_hash(hasher, n.namespace, &n.name)
        });
        id
    }

    /// Lets go of `id` if it is empty: it stays interned among the [`RETIRED_NODES`] most
    /// recently emptied, and the oldest beyond them is pruned (see the module contract).
    pub fn retire(&mut self, id: NodeId) {
        if !self.nodes[id as usize].as_ref().is_some_and(Node::is_empty) {
            return;
        }
        if self.retired.back() != Some(&id) {
            self.retired.push_back(id);
        }
        while self.retired.len() > RETIRED_NODES {
            let oldest = self.retired.pop_front().expect("over the bound");
            self.prune(oldest);
        }
    }

    /// Removes `id` and then its ancestors, as long as each holds nothing and has no children.
    pub fn prune(&mut self, mut id: NodeId) {
        loop {
            let Some(node) = self.nodes[id as usize].as_ref() else {
                return;
            };
            if !node.is_empty() {
                return;
            }
            let mut node = self.nodes[id as usize].take().expect("checked live");
            let hash = key_hash(&self.hasher, node.namespace, &node.name);
            if let Ok(entry) = self.index.find_entry(hash, |&other| other == id) {
                entry.remove();
            }
            self.free.push(id);
            if self.spare.names.len() < SPARE_BUFFERS {
                node.name.clear();
                self.spare.names.push(core::mem::take(&mut node.name));
            }
            let Some(parent) = node.parent else { return };
            let parent_node = self.nodes[parent as usize].as_mut().expect("live node id");
            let siblings = &mut parent_node.branches_mut(&mut self.spare).children;
            let slot = node.slot_in_parent as usize;
            siblings.swap_remove(slot);
            let moved = siblings.get(slot).copied();
            parent_node.shrink_branches(&mut self.spare);
            if let Some(moved) = moved {
                self.node_mut(moved).slot_in_parent = slot as u32;
            }
            id = parent;
        }
    }

    fn adjust_below(&mut self, id: NodeId, held: i32, queued: i32) {
        let mut cursor = self.node(id).parent;
        while let Some(p) = cursor {
            let node = self.node_mut(p);
            node.held_below = node.held_below.wrapping_add_signed(held);
            node.queued_below = node.queued_below.wrapping_add_signed(queued);
            cursor = node.parent;
        }
    }

    pub fn add_held(&mut self, id: NodeId, entry: HeldEntry) {
        self.node_mut(id).held.push(entry);
        self.adjust_below(id, 1, 0);
    }

    pub fn remove_held(&mut self, id: NodeId, lease: LeaseId) {
        let held = &mut self.node_mut(id).held;
        let at = held
            .iter()
            .position(|e| e.lease == lease)
            .expect("lease is held on its node");
        held.remove(at);
        self.adjust_below(id, -1, 0);
    }

    /// Appends to the node's queue; `entry.ticket` must be at least as new as every queued
    /// ticket (one ticket may queue two predicates on one node).
    pub fn add_queued(&mut self, id: NodeId, entry: QueuedEntry) {
        let node = self.nodes[id as usize].as_mut().expect("live node id");
        let queue = &mut node.branches_mut(&mut self.spare).queued;
        debug_assert!(queue.last().is_none_or(|last| last.ticket <= entry.ticket));
        queue.push(entry);
        self.adjust_below(id, 0, 1);
    }

    /// Removes one queued entry of `ticket` (call once per queued intent of the ticket).
    pub fn remove_queued(&mut self, id: NodeId, ticket: TicketId) {
        let node = self.nodes[id as usize].as_mut().expect("live node id");
        let queue = &mut node.branches_mut(&mut self.spare).queued;
        let at = queue
            .binary_search_by_key(&ticket, |e| e.ticket)
            .expect("ticket is queued on its node");
        queue.remove(at);
        node.shrink_branches(&mut self.spare);
        self.adjust_below(id, 0, -1);
    }

    /// Calls `visit` on `id`, then on each ancestor (nearest first), then on each descendant
    /// subtree that holds something `want`s (depth-first).
    pub fn for_each_overlapping(
        &self,
        id: NodeId,
        want: Want,
        mut visit: impl FnMut(NodeId, &Node, Relation),
    ) {
        let _ = self.try_for_each_overlapping(id, want, |id, node, relation| {
            visit(id, node, relation);
            ControlFlow::<()>::Continue(())
        });
    }

    /// Like [`for_each_overlapping`](Self::for_each_overlapping), stopping at the first
    /// `Break`, which it returns.
    pub fn try_for_each_overlapping<B>(
        &self,
        id: NodeId,
        want: Want,
        mut visit: impl FnMut(NodeId, &Node, Relation) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        let start = self.node(id);
        visit(id, start, Relation::Same)?;
        let mut cursor = start.parent;
        while let Some(p) = cursor {
            let node = self.node(p);
            visit(p, node, Relation::Ancestor)?;
            cursor = node.parent;
        }
        if !((want.held && start.held_below > 0) || (want.queued && start.queued_below > 0)) {
            return ControlFlow::Continue(());
        }
        let mut stack: Vec<NodeId> = Vec::new();
        let push_children = |stack: &mut Vec<NodeId>, node: &Node| {
            stack.extend(
                node.children()
                    .iter()
                    .copied()
                    .filter(|&c| want.enters(self.node(c))),
            );
        };
        push_children(&mut stack, start);
        while let Some(c) = stack.pop() {
            let node = self.node(c);
            visit(c, node, Relation::Descendant)?;
            push_children(&mut stack, node);
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(lease: u64) -> HeldEntry {
        HeldEntry {
            lease: LeaseId(lease),
            session: SessionId(1),
            predicate: Predicate::Mutates,
        }
    }

    #[test]
    fn intern_links_ancestors_and_prune_frees_them() {
        let mut t = Tree::default();
        let leaf = t.intern(0, "FILE:/a/b/c");
        assert_eq!(t.len(), 4);
        let a = t.find(0, "FILE:/a").unwrap();
        assert_eq!(t.node(leaf).parent, t.find(0, "FILE:/a/b"));
        t.add_held(leaf, held(1));
        assert_eq!(t.node(a).held_below, 1);
        assert!(
            t.find(1, "FILE:/a").is_none(),
            "namespaces are separate trees"
        );
        t.prune(leaf);
        assert_eq!(t.len(), 4, "a holder keeps the node alive");
        t.remove_held(leaf, LeaseId(1));
        assert_eq!(t.node(a).held_below, 0);
        t.prune(leaf);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn retired_nodes_stay_interned_up_to_the_bound() {
        let mut t = Tree::default();
        let hot = t.intern(0, "FILE:/hot/x");
        t.add_held(hot, held(1));
        t.retire(hot);
        assert_eq!(t.len(), 3, "a held node is not retired");
        t.remove_held(hot, LeaseId(1));
        t.retire(hot);
        t.retire(hot);
        assert_eq!(t.find(0, "FILE:/hot/x"), Some(hot), "kept interned");
        assert_eq!(t.intern(0, "FILE:/hot/x"), hot, "and found again");
        for i in 0..RETIRED_NODES {
            let id = t.intern(0, &alloc::format!("FILE:/cold/{i}"));
            t.retire(id);
        }
        assert_eq!(
            t.find(0, "FILE:/hot/x"),
            None,
            "the oldest is pruned beyond the bound"
        );
        assert_eq!(t.find(0, "FILE:/hot"), None, "with its emptied ancestors");
        assert_eq!(t.len(), RETIRED_NODES + 2);
    }

    #[test]
    fn walk_visits_exactly_the_overlapping_live_nodes() {
        let mut t = Tree::default();
        let ids: Vec<NodeId> = ["FILE:/a/b", "FILE:/a/b/c/d", "FILE:/a/x", "FILE:/ab"]
            .iter()
            .map(|n| t.intern(0, n))
            .collect();
        for (i, &id) in ids.iter().enumerate() {
            t.add_held(id, held(i as u64));
        }
        let mut seen = Vec::new();
        t.for_each_overlapping(ids[0], Want::HELD, |_, n, _| {
            if !n.held.is_empty() {
                seen.push(n.name.clone());
            }
        });
        seen.sort();
        assert_eq!(seen, ["FILE:/a/b", "FILE:/a/b/c/d"].map(String::from));
        // Pruning a sibling keeps slot bookkeeping right.
        t.remove_held(ids[2], LeaseId(2));
        t.prune(ids[2]);
        let a = t.find(0, "FILE:/a").unwrap();
        let b = t.node(a).children()[0];
        assert_eq!(t.node(b).slot_in_parent, 0);
        assert_eq!(&*t.node(b).name, "FILE:/a/b");
    }
}
