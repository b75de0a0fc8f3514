// Package migrations embeds the schema every shard carries. Files are goose
// SQL migrations with one DDL statement each, because MySQL commits DDL
// implicitly and a failed multi-statement file could not be retried. Only
// append new files; never edit a released one.
package migrations

import "embed"

// FS holds the *.sql migrations.
//
//go:embed *.sql
var FS embed.FS
