//! Writing rows into ClickHouse, and telling a refused row from an outage.
//!
//! A failed insert is one of two things. ClickHouse away, overloaded or not
//! yet migrated: wait and retry the same rows, forever (JetStream keeps them
//! meanwhile). ClickHouse refusing the data (e.g. "too many partitions for
//! single INSERT block" from events with absurd times): split the batch in
//! halves until the refused rows are alone, insert the rest, and hand the
//! refused ones back to be parked. Both tables deduplicate on `event_id`, so
//! rows inserted twice by a retry change no answer.

use anyhow::Context as _;
use jetcron_core::subjects;
use jetcron_io::clickhouse_schema::{JobEventRow, RunEventRow};

use crate::batch::Row;

/// Why an insert failed.
#[derive(Debug)]
pub enum InsertError {
    /// Try the same rows again later.
    Unavailable(anyhow::Error),
    /// ClickHouse refused these rows.
    Refused(String),
}

/// ClickHouse error codes that say "not now" rather than "not this data".
const TRANSIENT_CODES: &[u32] = &[
    60,  // UNKNOWN_TABLE: the schema is not applied yet
    81,  // UNKNOWN_DATABASE: likewise
    159, // TIMEOUT_EXCEEDED
    202, // TOO_MANY_SIMULTANEOUS_QUERIES
    209, // SOCKET_TIMEOUT
    210, // NETWORK_ERROR
    225, // NO_ZOOKEEPER: a replicated table without its Keeper
    241, // MEMORY_LIMIT_EXCEEDED
    242, // TABLE_IS_READ_ONLY
    285, // TOO_FEW_LIVE_REPLICAS (insert_quorum)
    286, // UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE
    319, // UNKNOWN_STATUS_OF_INSERT: retried, deduplicated if it landed
    999, // KEEPER_EXCEPTION
];

/// Whether a ClickHouse error message is about the data.
pub fn is_refusal(message: &str) -> bool {
    let code = message
        .split("Code: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse::<u32>().ok());
    match code {
        // 252 is both "too many parts" (wait) and "too many partitions for a
        // single INSERT block" (split).
        Some(252) => message.contains("partitions"),
        Some(code) => !TRANSIENT_CODES.contains(&code),
        None => false,
    }
}

fn classify(e: anyhow::Error) -> InsertError {
    let refused = e
        .chain()
        .filter_map(|c| c.downcast_ref::<clickhouse::error::Error>())
        .find_map(|c| match c {
            clickhouse::error::Error::BadResponse(message) if is_refusal(message) => {
                Some(message.clone())
            }
            _ => None,
        });
    match refused {
        Some(message) => InsertError::Refused(message),
        None => InsertError::Unavailable(e),
    }
}

/// Insert `rows` in one statement per table.
pub async fn insert(client: &clickhouse::Client, rows: &[&Row]) -> Result<(), InsertError> {
    let runs: Vec<&RunEventRow> = rows
        .iter()
        .filter_map(|r| match r {
            Row::Run(row) => Some(row.as_ref()),
            Row::Job(_) => None,
        })
        .collect();
    let jobs: Vec<&JobEventRow> = rows
        .iter()
        .filter_map(|r| match r {
            Row::Job(row) => Some(row.as_ref()),
            Row::Run(_) => None,
        })
        .collect();
    insert_rows(client, subjects::RUN_EVENTS_TABLE, &runs)
        .await
        .map_err(classify)?;
    insert_rows(client, subjects::JOB_EVENTS_TABLE, &jobs)
        .await
        .map_err(classify)
}

async fn insert_rows<R>(client: &clickhouse::Client, table: &str, rows: &[&R]) -> anyhow::Result<()>
where
    R: clickhouse::RowOwned + clickhouse::RowWrite,
{
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = client
        .insert_unescaped::<R>(table)
        .await
        .with_context(|| format!("start insert into {table}"))?;
    for row in rows {
        insert
            .write(row)
            .await
            .with_context(|| format!("write row into {table}"))?;
    }
    insert
        .end()
        .await
        .with_context(|| format!("finish insert into {table}"))
}

/// Insert `rows`, splitting around refused ones. Returns the indexes (into
/// `rows`) ClickHouse refused, each with its reason; an outage is an error.
pub async fn insert_splitting(
    client: &clickhouse::Client,
    rows: &[&Row],
) -> Result<Vec<(usize, String)>, anyhow::Error> {
    bisect_refusals(rows.len(), |start, end| insert(client, &rows[start..end])).await
}

/// Insert the range `0..len` with `insert`; a refused range is split in
/// halves until the refused rows are alone. Their indexes and reasons are
/// returned; an outage stops it with the error.
pub async fn bisect_refusals<F, Fut>(
    len: usize,
    mut insert: F,
) -> Result<Vec<(usize, String)>, anyhow::Error>
where
    F: FnMut(usize, usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), InsertError>>,
{
    let mut refused = Vec::new();
    let mut pending = vec![(0, len)];
    while let Some((start, end)) = pending.pop() {
        if start == end {
            continue;
        }
        match insert(start, end).await {
            Ok(()) => {}
            Err(InsertError::Unavailable(e)) => return Err(e),
            Err(InsertError::Refused(reason)) if end - start == 1 => refused.push((start, reason)),
            Err(InsertError::Refused(_)) => {
                let middle = start + (end - start) / 2;
                pending.push((middle, end));
                pending.push((start, middle));
            }
        }
    }
    refused.sort_by_key(|(index, _)| *index);
    Ok(refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bisection_isolates_the_refused_rows_and_stores_the_rest() {
        let poison = [7usize, 42, 43];
        let mut stored = vec![0u32; 100];
        let mut calls = 0;
        let refused = bisect_refusals(100, |start, end| {
            calls += 1;
            let result = if (start..end).any(|i| poison.contains(&i)) {
                Err(InsertError::Refused(format!("rows {start}..{end}")))
            } else {
                for row in &mut stored[start..end] {
                    *row += 1;
                }
                Ok(())
            };
            async move { result }
        })
        .await
        .expect("no outage");
        let indexes: Vec<usize> = refused.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, poison);
        for (i, times) in stored.iter().enumerate() {
            assert_eq!(*times, u32::from(!poison.contains(&i)), "row {i}");
        }
        assert!(calls < 40, "{calls} inserts for 3 refused rows of 100");
        let outage = bisect_refusals(10, |_, _| async {
            Err(InsertError::Unavailable(anyhow::anyhow!(
                "connection refused"
            )))
        })
        .await;
        assert!(outage.is_err());
    }

    #[test]
    fn data_errors_are_told_from_outages() {
        assert!(is_refusal(
            "Code: 252, e.displayText() = DB::Exception: Too many partitions for single INSERT block (more than 100)"
        ));
        assert!(!is_refusal(
            "Code: 252, e.displayText() = DB::Exception: Too many parts (300). Merges are processing significantly slower than inserts"
        ));
        assert!(!is_refusal(
            "Code: 60. DB::Exception: Table jetcron.run_events doesn't exist"
        ));
        assert!(!is_refusal("Code: 241, Memory limit exceeded"));
        assert!(!is_refusal(
            "Code: 285. DB::Exception: Number of alive replicas (1) is less than requested quorum (2)"
        ));
        assert!(!is_refusal(
            "Code: 319. DB::Exception: Unknown status, client must retry"
        ));
        assert!(!is_refusal(
            "Code: 225. DB::Exception: Cannot get ZooKeeper"
        ));
        assert!(is_refusal("Code: 27. DB::Exception: Cannot parse input"));
        assert!(!is_refusal("connection refused"));
    }
}
