//! One table of the dataset: its columns, and a writer that takes rows and writes them to one
//! Parquet file in batches, so memory holds one batch whatever the table's length.

use arrow_array::builder::{make_builder, ArrayBuilder, BooleanBuilder, StringBuilder};
use arrow_array::builder::{UInt32Builder, UInt64Builder};
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows a batch holds before it is written.
const BATCH_ROWS: usize = 64 * 1024;

/// A column's type in the dataset's schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An unsigned 64-bit integer (addresses, sizes, times, positions).
    U64,
    /// An unsigned 32-bit integer (devices, context and frame ids, lines).
    U32,
    /// UTF-8 text.
    Text,
    /// A boolean.
    Bool,
}

impl Kind {
    fn data_type(self) -> DataType {
        match self {
            Kind::U64 => DataType::UInt64,
            Kind::U32 => DataType::UInt32,
            Kind::Text => DataType::Utf8,
            Kind::Bool => DataType::Boolean,
        }
    }
}

/// A column: its name, its type and whether it may be null.
pub struct Column {
    /// The name, as queries use it.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Whether a row may leave it null.
    pub nullable: bool,
}

/// A column that is never null.
pub const fn required(name: &'static str, kind: Kind) -> Column {
    Column {
        name,
        kind,
        nullable: false,
    }
}

/// A column that may be null.
pub const fn optional(name: &'static str, kind: Kind) -> Column {
    Column {
        name,
        kind,
        nullable: true,
    }
}

/// One value of a row, in its column's order.
#[derive(Clone, Copy, Debug)]
pub enum Cell<'a> {
    /// For a [`Kind::U64`] column.
    U64(Option<u64>),
    /// For a [`Kind::U32`] column.
    U32(Option<u32>),
    /// For a [`Kind::Text`] column.
    Text(Option<&'a str>),
    /// For a [`Kind::Bool`] column.
    Bool(bool),
}

/// The schema of `columns`.
pub fn schema(columns: &[Column]) -> SchemaRef {
    Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(c.name, c.kind.data_type(), c.nullable))
            .collect::<Vec<_>>(),
    ))
}

/// Writes rows of one table to one Parquet file, Snappy-compressed.
pub struct TableWriter {
    path: PathBuf,
    schema: SchemaRef,
    builders: Vec<Box<dyn ArrayBuilder>>,
    writer: ArrowWriter<File>,
    rows: usize,
}

impl TableWriter {
    /// Creates `path` (its folder must exist) for a table of `columns`.
    pub fn create(path: &Path, columns: &[Column]) -> anyhow::Result<TableWriter> {
        let schema = schema(columns);
        let file = File::create(path)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
        let properties = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        let writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(properties))?;
        let builders = columns
            .iter()
            .map(|c| make_builder(&c.kind.data_type(), BATCH_ROWS))
            .collect();
        Ok(TableWriter {
            path: path.to_owned(),
            schema,
            builders,
            writer,
            rows: 0,
        })
    }

    /// Appends a row: one cell per column, each of its column's kind. A row that does not
    /// match the columns is a bug in the table's code, reported as an error.
    pub fn push(&mut self, row: &[Cell<'_>]) -> anyhow::Result<()> {
        anyhow::ensure!(
            row.len() == self.builders.len(),
            "internal error: a row of {} cells for {} columns of {}",
            row.len(),
            self.builders.len(),
            self.path.display()
        );
        for (index, (builder, cell)) in self.builders.iter_mut().zip(row).enumerate() {
            let any = builder.as_any_mut();
            let appended = match cell {
                Cell::U64(v) => any
                    .downcast_mut::<UInt64Builder>()
                    .map(|b| b.append_option(*v)),
                Cell::U32(v) => any
                    .downcast_mut::<UInt32Builder>()
                    .map(|b| b.append_option(*v)),
                Cell::Text(v) => any
                    .downcast_mut::<StringBuilder>()
                    .map(|b| b.append_option(*v)),
                Cell::Bool(v) => any
                    .downcast_mut::<BooleanBuilder>()
                    .map(|b| b.append_value(*v)),
            };
            anyhow::ensure!(
                appended.is_some(),
                "internal error: column {} of {} is not {cell:?}",
                self.schema.field(index).name(),
                self.path.display()
            );
        }
        self.rows += 1;
        if self.builders[0].len() >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the rows gathered so far as one batch.
    fn flush(&mut self) -> anyhow::Result<()> {
        if self.builders.first().is_none_or(|b| b.is_empty()) {
            return Ok(());
        }
        let arrays = self.builders.iter_mut().map(|b| b.finish()).collect();
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), arrays)?;
        self.writer
            .write(&batch)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", self.path.display()))
    }

    /// Writes what is left and the file's footer; returns the rows written.
    pub fn finish(mut self) -> anyhow::Result<usize> {
        self.flush()?;
        self.writer
            .close()
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", self.path.display()))?;
        Ok(self.rows)
    }
}
