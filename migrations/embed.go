// Package migrations embeds the schema every shard carries, as goose SQL
// migrations. 00001_baseline.sql creates every table. MySQL commits DDL
// implicitly, so a migration runs without a transaction and each of its
// statements is idempotent (CREATE TABLE IF NOT EXISTS, INSERT IGNORE): a
// rerun after a failure half-way completes it. A schema change is a new
// file appended after the others; a released file is never edited.
package migrations

import "embed"

// FS holds the *.sql migrations.
//
//go:embed *.sql
var FS embed.FS
