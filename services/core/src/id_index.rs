//! An index from ids to the numbers of their holders (a table's rows, a
//! plan's slots), where the holder already keeps the id.
//!
//! A holder of a million jobs that also kept a map keyed by the id paid for
//! a second pointer to it in every entry: about 50 bytes a job at the map's
//! load. This keeps only the numbers (about 5 bytes a job) and asks the
//! holder for a number's id when it compares or rehashes.

use hashbrown::{DefaultHashBuilder, HashTable};

/// Numbers found by the id their holder keeps for them.
#[derive(Debug, Default)]
pub struct IdIndex {
    table: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl IdIndex {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    fn hash(&self, id: &str) -> u64 {
        std::hash::BuildHasher::hash_one(&self.hasher, id)
    }

    /// The number indexed under `id`; `id_of` gives the id a number holds
    /// (`None`: it holds nothing).
    pub fn find<'a>(&self, id: &str, id_of: impl Fn(u32) -> Option<&'a str>) -> Option<u32> {
        self.table
            .find(self.hash(id), |&n| id_of(n) == Some(id))
            .copied()
    }

    /// Index `number` under `id`, which is not indexed yet (`id_of` as for
    /// [`IdIndex::find`], and `number` must already hold `id`).
    pub fn insert<'a>(&mut self, id: &str, number: u32, id_of: impl Fn(u32) -> Option<&'a str>) {
        let hash = self.hash(id);
        let Self { table, hasher } = self;
        table.insert_unique(hash, number, |&n| {
            std::hash::BuildHasher::hash_one(&*hasher, id_of(n).unwrap_or(""))
        });
    }

    /// An empty index with room for `numbers`.
    pub fn with_capacity(numbers: usize) -> Self {
        Self {
            table: HashTable::with_capacity(numbers),
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// Make room for `more` numbers beyond those indexed (`id_of` as for
    /// [`IdIndex::find`]; it must give the id of every number indexed, or
    /// the table is rebuilt with that number in the wrong place).
    pub fn reserve<'a>(&mut self, more: usize, id_of: impl Fn(u32) -> Option<&'a str>) {
        let Self { table, hasher } = self;
        table.reserve(more, |&n| {
            std::hash::BuildHasher::hash_one(&*hasher, id_of(n).unwrap_or(""))
        });
    }

    /// Take `id` out of the index; its number, if it was indexed.
    pub fn remove<'a>(&mut self, id: &str, id_of: impl Fn(u32) -> Option<&'a str>) -> Option<u32> {
        let hash = self.hash(id);
        let entry = self
            .table
            .find_entry(hash, |&n| id_of(n) == Some(id))
            .ok()?;
        Some(entry.remove().0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_found_by_the_ids_their_holder_keeps() {
        let mut ids: Vec<Option<String>> = Vec::new();
        let mut index = IdIndex::default();
        for n in 0..1_000u32 {
            ids.push(Some(format!("job-{n}")));
            let holder = &ids;
            index.insert(&format!("job-{n}"), n, |m| holder[m as usize].as_deref());
        }
        let holder = &ids;
        assert_eq!(
            index.find("job-640", |m| holder[m as usize].as_deref()),
            Some(640)
        );
        assert_eq!(
            index.find("job-1000", |m| holder[m as usize].as_deref()),
            None
        );
        assert_eq!(
            index.remove("job-7", |m| holder[m as usize].as_deref()),
            Some(7)
        );
        assert_eq!(index.find("job-7", |m| holder[m as usize].as_deref()), None);
        assert_eq!(
            index.remove("job-7", |m| holder[m as usize].as_deref()),
            None
        );
        assert_eq!(index.len(), 999);

        // Room made for more rebuilds the table by the holder's ids.
        index.reserve(50_000, |m| holder[m as usize].as_deref());
        assert_eq!(
            index.find("job-640", |m| holder[m as usize].as_deref()),
            Some(640)
        );
        assert_eq!(index.find("job-7", |m| holder[m as usize].as_deref()), None);
        assert_eq!(index.len(), 999);
    }
}
