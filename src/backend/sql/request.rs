//! One request builder for both dialects: a statement of the dialect's table (its
//! text, written once per candidate) with its text parameters bound in the order the
//! statement names them. The statements that bind numbers too build their requests
//! in their dialect's module.

use sqlx::{Database, Encode, FromRow, Type};

/// One statement with its parameters bound, for database `DB`.
pub type Request<'q, DB> = sqlx::query::Query<'q, DB, <DB as Database>::Arguments<'q>>;

/// A request whose answer is one column, as `O`.
pub type Scalar<'q, DB, O> = sqlx::query::QueryScalar<'q, DB, O, <DB as Database>::Arguments<'q>>;

/// A request whose answer is rows as tuples `O`.
pub type Tuples<'q, DB, O> = sqlx::query::QueryAs<'q, DB, O, <DB as Database>::Arguments<'q>>;

/// `sql` with `texts` bound, in their order.
pub fn texts<'q, DB>(sql: &'q str, texts: &[&'q str]) -> Request<'q, DB>
where
    DB: Database,
    &'q str: Encode<'q, DB> + Type<DB>,
{
    (texts.iter()).fold(sqlx::query(sql), |q, text| q.bind(*text))
}

/// [`texts`], answered with one column.
pub fn scalar<'q, DB, O>(sql: &'q str, texts: &[&'q str]) -> Scalar<'q, DB, O>
where
    DB: Database,
    (O,): for<'r> FromRow<'r, DB::Row>,
    &'q str: Encode<'q, DB> + Type<DB>,
{
    (texts.iter()).fold(sqlx::query_scalar(sql), |q, text| q.bind(*text))
}

/// [`texts`], answered with rows as tuples.
pub fn tuples<'q, DB, O>(sql: &'q str, texts: &[&'q str]) -> Tuples<'q, DB, O>
where
    DB: Database,
    O: for<'r> FromRow<'r, DB::Row>,
    &'q str: Encode<'q, DB> + Type<DB>,
{
    (texts.iter()).fold(sqlx::query_as(sql), |q, text| q.bind(*text))
}
