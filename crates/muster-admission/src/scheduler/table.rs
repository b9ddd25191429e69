//! Every job the scheduler knows, by id.
//!
//! A cycle looks jobs up by id far more often than anything walks them: each preemption
//! candidate, each job a reservation search releases, each served job's shape and usage. Ids
//! of one fleet share long prefixes (`namespace/team-…`), so an ordered map's dozen or so
//! comparisons per lookup each read deep into two strings; a hash and one comparison do not.
//! Callers are still promised the jobs in id order ([`super::Scheduler::jobs`]), so the ids
//! are kept in order beside the table, and a walk in order looks each one up.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use foldhash::fast::FixedState;

use super::{Entry, SharedId};

/// The scheduler's jobs: hashed for lookups (with a fixed seed, though nothing depends on
/// the hash order: walks go in id order), and, unless the order is forgotten
/// ([`JobTable::forget_order`]), ordered for walks. Both are keyed by the entry's own shared
/// id ([`Entry::id`]): a table copied for each of a forecast's runs copies pointers, not
/// 15,000 ids. Entries are boxed: a hash table keeps about as many empty places as full
/// ones, and an entry (128 bytes, most of it the holding a waiting job has none of) in each
/// place cost 15,000 waiting jobs 5 MB where their boxes take 2.
#[derive(Clone)]
pub(super) struct JobTable {
    entries: HashMap<SharedId, Box<Entry>, FixedState>,
    /// The same ids, in order; `None` once the order is forgotten
    /// ([`JobTable::forget_order`]), when walks sort the ids instead.
    ids: Option<BTreeSet<SharedId>>,
    /// How many jobs each LocalQueue (`namespace/name`) has, kept as jobs come and go: queue
    /// statuses count every queue's jobs once a second or so, and a walk over every job
    /// to count them cost as much as the rest of a pass at 15,000 jobs. Absent: none.
    per_local_queue: HashMap<String, usize, FixedState>,
}

impl Default for JobTable {
    fn default() -> JobTable {
        JobTable {
            entries: HashMap::default(),
            ids: Some(BTreeSet::new()),
            per_local_queue: HashMap::default(),
        }
    }
}

impl JobTable {
    /// The entry of `id`.
    pub(super) fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.get(id).map(|e| &**e)
    }

    /// The entry of `id`, to change it.
    pub(super) fn get_mut(&mut self, id: &str) -> Option<&mut Entry> {
        self.entries.get_mut(id).map(|e| &mut **e)
    }

    /// Adds (or replaces) the entry of its id.
    pub(super) fn insert(&mut self, entry: Entry) {
        let id = Arc::clone(&entry.id);
        if let Some(ids) = &mut self.ids
            && !self.entries.contains_key(&id)
        {
            ids.insert(Arc::clone(&id));
        }
        self.count_in(&entry.job.local_queue);
        if let Some(old) = self.entries.insert(id, Box::new(entry)) {
            self.count_out(&old.job.local_queue);
        }
    }

    /// Takes the entry of `id` out.
    pub(super) fn remove(&mut self, id: &str) -> Option<Entry> {
        let entry = self.entries.remove(id)?;
        if let Some(ids) = &mut self.ids {
            ids.remove(id);
        }
        self.count_out(&entry.job.local_queue);
        Some(*entry)
    }

    fn count_in(&mut self, local_queue: &str) {
        match self.per_local_queue.get_mut(local_queue) {
            Some(n) => *n += 1,
            None => {
                self.per_local_queue.insert(local_queue.to_owned(), 1);
            }
        }
    }

    fn count_out(&mut self, local_queue: &str) {
        if let Some(n) = self.per_local_queue.get_mut(local_queue) {
            *n -= 1;
            if *n == 0 {
                self.per_local_queue.remove(local_queue);
            }
        }
    }

    /// How many jobs each LocalQueue has (those with none are left out), in no order to
    /// rely on.
    pub(super) fn per_local_queue(&self) -> impl Iterator<Item = (&str, usize)> {
        self.per_local_queue.iter().map(|(q, n)| (q.as_str(), *n))
    }

    /// Stops keeping the ids in order: every job that comes or goes then costs a hash, not
    /// an insertion among all the others' ids, and each walk in order sorts the ids. For
    /// tables that are never walked, such as a forecast's forward runs'.
    pub(super) fn forget_order(&mut self) {
        self.ids = None;
    }

    /// How many jobs there are.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every job with its entry, in id order.
    pub(super) fn iter(&self) -> Box<dyn Iterator<Item = (&str, &Entry)> + '_> {
        match &self.ids {
            Some(ids) => Box::new(
                ids.iter()
                    .filter_map(|id| self.entries.get(id).map(|e| (&**id, &**e))),
            ),
            None => {
                let mut all: Vec<(&str, &Entry)> =
                    self.entries.iter().map(|(id, e)| (&**id, &**e)).collect();
                all.sort_unstable_by(|a, b| a.0.cmp(b.0));
                Box::new(all.into_iter())
            }
        }
    }

    /// Every entry, in id order.
    pub(super) fn values(&self) -> impl Iterator<Item = &Entry> {
        self.iter().map(|(_, e)| e)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::JobTable;
    use crate::job::Job;
    use crate::scheduler::{Entry, JobState};

    fn entry(id: &str) -> Entry {
        Entry {
            job: Arc::new(Job {
                id: id.to_owned(),
                uid: format!("uid-{id}"),
                local_queue: "ns/q".to_owned(),
                priority: 0,
                created: 0,
                expected_runtime: None,
                pod_sets: Vec::new(),
                invalid: None,
                suspended: false,
                provisioned: false,
            }),
            id: Arc::from(id),
            shape: 0,
            booking: None,
            state: JobState::Pending,
            usage: Arc::from(Vec::new()),
        }
    }

    #[test]
    fn lookups_find_what_was_put_and_walks_go_in_id_order() {
        let mut table = JobTable::default();
        for id in ["ns/c", "ns/a", "ns/b", "ns/a"] {
            table.insert(entry(id));
        }
        assert_eq!(table.len(), 3);
        let ids: Vec<&str> = table.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["ns/a", "ns/b", "ns/c"]);
        assert!(table.get("ns/b").is_some_and(|e| e.job.id == "ns/b"));
        if let Some(e) = table.get_mut("ns/b") {
            e.shape = 7;
        }
        assert_eq!(table.get("ns/b").map(|e| e.shape), Some(7));
        assert!(table.remove("ns/b").is_some());
        assert!(table.remove("ns/b").is_none());
        assert!(table.get("ns/b").is_none());
        let left: Vec<&str> = table.values().map(|e| e.job.id.as_str()).collect();
        assert_eq!(left, ["ns/a", "ns/c"]);
    }

    fn in_queue(id: &str, local_queue: &str) -> Entry {
        let mut e = entry(id);
        e.job = Arc::new(Job {
            local_queue: local_queue.to_owned(),
            ..(*e.job).clone()
        });
        e
    }

    fn counts(table: &JobTable) -> Vec<(String, usize)> {
        let mut all: Vec<(String, usize)> = table
            .per_local_queue()
            .map(|(q, n)| (q.to_owned(), n))
            .collect();
        all.sort_unstable();
        all
    }

    #[test]
    fn jobs_are_counted_per_local_queue_as_they_come_move_and_go() {
        let mut table = JobTable::default();
        table.insert(in_queue("ns/a", "ns/q1"));
        table.insert(in_queue("ns/b", "ns/q1"));
        table.insert(in_queue("ns/c", "ns/q2"));
        assert_eq!(
            counts(&table),
            [("ns/q1".to_owned(), 2), ("ns/q2".to_owned(), 1)]
        );
        // Submitted again under another LocalQueue: counted there only.
        table.insert(in_queue("ns/b", "ns/q2"));
        // Submitted again unchanged: still counted once.
        table.insert(in_queue("ns/c", "ns/q2"));
        assert_eq!(
            counts(&table),
            [("ns/q1".to_owned(), 1), ("ns/q2".to_owned(), 2)]
        );
        assert!(table.remove("ns/a").is_some());
        assert!(table.remove("ns/a").is_none());
        assert_eq!(counts(&table), [("ns/q2".to_owned(), 2)]);
        let copy = table.clone();
        assert!(table.remove("ns/b").is_some() && table.remove("ns/c").is_some());
        assert!(counts(&table).is_empty());
        assert_eq!(counts(&copy), [("ns/q2".to_owned(), 2)]);
    }

    #[test]
    fn a_table_that_forgot_its_order_walks_in_id_order_still() {
        let mut kept = JobTable::default();
        let mut forgot = JobTable::default();
        forgot.forget_order();
        for id in ["ns/m", "ns/c", "ns/x", "ns/a", "ns/c", "ns/q"] {
            kept.insert(entry(id));
            forgot.insert(entry(id));
        }
        for id in ["ns/x", "ns/nothing"] {
            assert_eq!(kept.remove(id).is_some(), forgot.remove(id).is_some());
        }
        let walk =
            |t: &JobTable| -> Vec<String> { t.iter().map(|(id, _)| id.to_owned()).collect() };
        assert_eq!(walk(&forgot), walk(&kept));
        assert_eq!(walk(&forgot), ["ns/a", "ns/c", "ns/m", "ns/q"]);
        assert_eq!(forgot.len(), 4);
    }
}
