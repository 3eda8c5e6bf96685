//! SQL reports: the views of the `report` schema (see `migrations/20261129000010_reports.sql`),
//! listed from the database catalog (each view's comment is its description, so the list and
//! the views never disagree) and run in a tenant's or the platform's scope. The same views are
//! what a `gatehouse_report` login reads with `psql`.

pub mod cli;
pub mod http;

use serde::Serialize;
use serde_json::Value;
use sqlx::{AssertSqlSafe, PgConnection};

use crate::{
    db::{Db, Scope},
    error::{Error, Result},
};

/// Rows one run returns at most (the API and the CLI alike); `truncated` says when more exist.
pub const ROW_CAP: i64 = 10_000;

/// A report: its view's name and what it shows.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Report {
    pub name: String,
    pub description: String,
}

/// A report's output: its columns in view order, then the rows (JSON values, `null` for SQL
/// NULL).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Output {
    pub report: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
    pub truncated: bool,
}

/// How `render` prints an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
}

impl Format {
    pub fn parse(s: &str) -> Result<Format> {
        match s {
            "table" => Ok(Format::Table),
            "csv" => Ok(Format::Csv),
            "json" => Ok(Format::Json),
            _ => Err(Error::invalid("invalid_format", Some("format"), "format is table, csv or json")),
        }
    }
}

async fn list_in(conn: &mut PgConnection) -> Result<Vec<Report>> {
    Ok(sqlx::query_as!(
        Report,
        r#"SELECT c.relname::text AS "name!", coalesce(obj_description(c.oid, 'pg_class'), '') AS "description!"
           FROM pg_class c WHERE c.relnamespace = 'report'::regnamespace AND c.relkind = 'v' ORDER BY 1"#,
    )
    .fetch_all(conn)
    .await?)
}

/// Every report, by name.
pub async fn list(db: &Db) -> Result<Vec<Report>> {
    db.single_decision(Scope::Global, |conn, _| Box::pin(list_in(conn))).await
}

async fn run_in(conn: &mut PgConnection, name: &str) -> Result<Output> {
    // The name is checked against the catalog, so only a report's own name reaches the SQL.
    if !list_in(&mut *conn).await?.iter().any(|r| r.name == name) {
        return Err(Error::NotFound { what: "report" });
    }
    let columns = sqlx::query_scalar!(
        r#"SELECT attname::text AS "column!" FROM pg_attribute
           WHERE attrelid = format('report.%I', $1::text)::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum"#,
        name,
    )
    .fetch_all(&mut *conn)
    .await?;
    let sql = format!("SELECT row_to_json(r)::text FROM report.\"{name}\" r LIMIT $1");
    let texts: Vec<String> = sqlx::query_scalar(AssertSqlSafe(sql)).bind(ROW_CAP + 1).fetch_all(&mut *conn).await?;
    let truncated = texts.len() as i64 > ROW_CAP;
    let mut rows = Vec::with_capacity(texts.len());
    for text in texts.iter().take(ROW_CAP as usize) {
        let mut object: serde_json::Map<String, Value> =
            serde_json::from_str(text).map_err(|e| anyhow::anyhow!("report row unreadable: {e}"))?;
        rows.push(columns.iter().map(|c| object.remove(c).unwrap_or(Value::Null)).collect());
    }
    Ok(Output { report: name.to_owned(), columns, rows, truncated })
}

/// Runs report `name` in `scope`: a tenant's scope shows that tenant's rows only (platform-wide
/// reports show none), the platform scope every row. Unknown name: `not_found`.
pub async fn run(db: &Db, scope: Scope, name: &str) -> Result<Output> {
    db.single_decision(scope, |conn, _| Box::pin(run_in(conn, name))).await
}

/// One value as a table or CSV cell: SQL NULL is empty, a string unquoted.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// RFC 4180: quote a field that holds a comma, quote or line break; double inner quotes.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

/// Prints an output: `table` (aligned columns, a header line), `csv` (header row), or `json`
/// (one object per row, one per line, keys in column order).
pub fn render(out: &Output, format: Format) -> String {
    let mut text = String::new();
    match format {
        Format::Json => {
            for row in &out.rows {
                let pairs: Vec<String> =
                    out.columns.iter().zip(row).map(|(c, v)| format!("{}:{}", Value::String(c.clone()), v)).collect();
                text.push_str(&format!("{{{}}}\n", pairs.join(",")));
            }
        }
        Format::Csv => {
            let line = |cells: Vec<String>| cells.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(",") + "\r\n";
            text.push_str(&line(out.columns.clone()));
            for row in &out.rows {
                text.push_str(&line(row.iter().map(cell).collect()));
            }
        }
        Format::Table => {
            let cells: Vec<Vec<String>> =
                out.rows.iter().map(|r| r.iter().map(|v| cell(v).replace(['\n', '\t'], " ")).collect()).collect();
            let widths: Vec<usize> = out
                .columns
                .iter()
                .enumerate()
                .map(|(i, c)| cells.iter().map(|r| r[i].chars().count()).chain([c.chars().count()]).max().unwrap_or(0))
                .collect();
            let line = |cells: &[String]| {
                let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}", w = *w)).collect();
                padded.join("  ").trim_end().to_owned() + "\n"
            };
            text.push_str(&line(&out.columns));
            for row in &cells {
                text.push_str(&line(row));
            }
        }
    }
    if out.truncated {
        tracing::warn!(report = %out.report, cap = ROW_CAP, "report truncated");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output() -> Output {
        Output {
            report: "r".into(),
            columns: vec!["name".into(), "n".into(), "note".into()],
            rows: vec![
                vec![Value::from("a,b"), Value::from(3), Value::Null],
                vec![Value::from("say \"hi\""), Value::from(1.5), Value::from("x\ny")],
            ],
            truncated: false,
        }
    }

    #[test]
    fn csv_quotes_what_needs_quoting() {
        assert_eq!(render(&output(), Format::Csv), "name,n,note\r\n\"a,b\",3,\r\n\"say \"\"hi\"\"\",1.5,\"x\ny\"\r\n");
    }

    #[test]
    fn json_keeps_column_order_and_table_aligns() {
        let json = render(&output(), Format::Json);
        assert_eq!(json.lines().next(), Some(r#"{"name":"a,b","n":3,"note":null}"#));
        let table = render(&output(), Format::Table);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "name      n    note");
        assert_eq!(lines[2], "say \"hi\"  1.5  x y");
        assert!(Format::parse("xml").is_err());
    }
}
