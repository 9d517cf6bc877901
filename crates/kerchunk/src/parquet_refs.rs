//! One `refs.<i>.parq` file of a Parquet reference set (fsspec's `LazyReferenceMapper` layout),
//! decoded from its bytes into compact rows. Columns: `path` (string, possibly dictionary encoded),
//! `offset` and `size` (integers, possibly nullable), `raw` (binary). A row with `raw` holds inline
//! bytes; with neither `path` nor `raw`, no chunk; with `path`, offset 0 and size 0, the whole file;
//! otherwise a byte range.

use std::collections::HashMap;

use bytes::Bytes;
use parquet::column::reader::ColumnReader;
use parquet::file::reader::{FileReader, RowGroupReader, SerializedFileReader};

use crate::error::{format, Error, Result};
use crate::refs::{Kind, Ref};

/// The decoded rows of one file. `Ref::target` indexes `paths`; inline rows index `inline`.
#[derive(Debug, Default)]
pub(crate) struct RefRows {
    pub paths: Vec<String>,
    pub rows: Vec<Ref>,
    pub inline: Bytes,
}

impl RefRows {
    pub(crate) fn inline(&self, r: &Ref) -> Bytes {
        let start = r.offset as usize;
        self.inline.slice(start..start + r.length as usize)
    }
}

/// Values of one column for every row (`None` = null).
enum Column {
    Bytes(Vec<Option<Vec<u8>>>),
    Ints(Vec<Option<i64>>),
}

/// Reads every value of column `index` of a row group, with nulls where definition levels say so.
fn read_column(
    rg: &dyn RowGroupReader,
    index: usize,
    rows: usize,
    max_def: i16,
) -> parquet::errors::Result<Column> {
    fn spread<T>(values: Vec<T>, defs: &[i16], max_def: i16, rows: usize) -> Vec<Option<T>> {
        if max_def == 0 {
            return values.into_iter().map(Some).collect();
        }
        let mut values = values.into_iter();
        let mut out = Vec::with_capacity(rows);
        for &d in defs {
            out.push(if d == max_def { values.next() } else { None });
        }
        out
    }
    let mut defs = Vec::new();
    match rg.get_column_reader(index)? {
        ColumnReader::ByteArrayColumnReader(mut r) => {
            let mut values = Vec::new();
            loop {
                let (records, _, _) =
                    r.read_records(rows.max(1), Some(&mut defs), None, &mut values)?;
                if records == 0 {
                    break;
                }
            }
            let values = values.into_iter().map(|v| v.data().to_vec()).collect();
            Ok(Column::Bytes(spread(values, &defs, max_def, rows)))
        }
        ColumnReader::Int64ColumnReader(mut r) => {
            let mut values = Vec::new();
            loop {
                let (records, _, _) =
                    r.read_records(rows.max(1), Some(&mut defs), None, &mut values)?;
                if records == 0 {
                    break;
                }
            }
            Ok(Column::Ints(spread(values, &defs, max_def, rows)))
        }
        ColumnReader::Int32ColumnReader(mut r) => {
            let mut values = Vec::new();
            loop {
                let (records, _, _) =
                    r.read_records(rows.max(1), Some(&mut defs), None, &mut values)?;
                if records == 0 {
                    break;
                }
            }
            let values = values.into_iter().map(i64::from).collect();
            Ok(Column::Ints(spread(values, &defs, max_def, rows)))
        }
        _ => Err(parquet::errors::ParquetError::General(
            "unexpected column type".into(),
        )),
    }
}

/// Decodes a reference file. `file` names it in errors.
pub(crate) fn decode(file: &str, data: Bytes) -> Result<RefRows> {
    let parquet_error = |source| Error::Parquet {
        file: file.to_string(),
        source,
    };
    let reader = SerializedFileReader::new(data).map_err(parquet_error)?;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    let column = |name: &str| {
        schema
            .columns()
            .iter()
            .position(|c| c.path().parts() == [name.to_string()])
            .map(|i| (i, schema.column(i).max_def_level()))
    };
    let (path_col, offset_col, size_col, raw_col) = (
        column("path"),
        column("offset"),
        column("size"),
        column("raw"),
    );
    if path_col.is_none() && raw_col.is_none() {
        return Err(format(file, "has neither a path nor a raw column"));
    }
    let mut out = RefRows::default();
    let mut path_ids: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut inline: Vec<u8> = Vec::new();
    for g in 0..reader.num_row_groups() {
        let rg = reader.get_row_group(g).map_err(parquet_error)?;
        let rows = usize::try_from(rg.metadata().num_rows())
            .map_err(|_| format(file, "negative row count"))?;
        let read = |col: Option<(usize, i16)>| -> Result<Option<Column>> {
            col.map(|(i, max_def)| read_column(rg.as_ref(), i, rows, max_def))
                .transpose()
                .map_err(parquet_error)
        };
        let bytes_of = |c: Option<Column>, name: &str| -> Result<Vec<Option<Vec<u8>>>> {
            match c {
                None => Ok(vec![None; rows]),
                Some(Column::Bytes(v)) if v.len() == rows => Ok(v),
                Some(_) => Err(format(
                    file,
                    format!("column {name} is not a binary column of {rows} rows"),
                )),
            }
        };
        let ints_of = |c: Option<Column>, name: &str| -> Result<Vec<Option<i64>>> {
            match c {
                None => Ok(vec![None; rows]),
                Some(Column::Ints(v)) if v.len() == rows => Ok(v),
                Some(_) => Err(format(
                    file,
                    format!("column {name} is not an integer column of {rows} rows"),
                )),
            }
        };
        let paths = bytes_of(read(path_col)?, "path")?;
        let raws = bytes_of(read(raw_col)?, "raw")?;
        let offsets = ints_of(read(offset_col)?, "offset")?;
        let sizes = ints_of(read(size_col)?, "size")?;
        for (((path, raw), offset), size) in paths.into_iter().zip(raws).zip(offsets).zip(sizes) {
            let row = out.rows.len();
            let r = match (raw, path) {
                (Some(raw), _) => {
                    let r = Ref {
                        offset: inline.len() as u64,
                        length: raw.len() as u64,
                        target: 0,
                        kind: Kind::Inline,
                    };
                    inline.extend_from_slice(&raw);
                    r
                }
                (None, None) => Ref::MISSING,
                (None, Some(path)) => {
                    let needed = |value: Option<i64>, name: &str, col: Option<(usize, i16)>| {
                        value.ok_or_else(|| {
                            let what = match col {
                                None => format!("has no {name} column"),
                                Some(_) => format!("has a null {name}"),
                            };
                            format(
                                file,
                                format!(
                                    "{what} in row {row}, which names the path {}: a reference to a path needs its offset and size (size 0 for the whole file)",
                                    String::from_utf8_lossy(&path)
                                ),
                            )
                        })
                    };
                    let (offset, size) = (
                        needed(offset, "offset", offset_col)?,
                        needed(size, "size", size_col)?,
                    );
                    let next = out.paths.len() as u32;
                    let target = match path_ids.get(&path) {
                        Some(&id) => id,
                        None => {
                            let text = String::from_utf8(path.clone()).map_err(|_| {
                                format(file, format!("row {row}: the path is not UTF-8"))
                            })?;
                            out.paths.push(text);
                            path_ids.insert(path, next);
                            next
                        }
                    };
                    let (Ok(offset), Ok(length)) = (u64::try_from(offset), u64::try_from(size))
                    else {
                        return Err(format(
                            file,
                            format!("row {row}: negative offset {offset} or size {size}"),
                        ));
                    };
                    let kind = if offset == 0 && length == 0 {
                        Kind::Whole
                    } else {
                        Kind::Range
                    };
                    Ref {
                        offset,
                        length,
                        target,
                        kind,
                    }
                }
            };
            out.rows.push(r);
        }
    }
    out.inline = Bytes::from(inline);
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use parquet::basic::{Compression, Repetition, Type as PhysicalType};
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::types::Type;
    use std::sync::Arc;

    /// A row for [`write`]: `(path, offset, size, raw)`.
    pub(crate) type Row<'a> = (Option<&'a str>, i64, i64, Option<&'a [u8]>);

    /// Writes a reference file as fastparquet does (zstd, nullable path and raw, required ints).
    pub(crate) fn write(rows: &[Row]) -> Vec<u8> {
        write_columns(rows, &["path", "offset", "size", "raw"])
    }

    /// As [`write`], with only the columns named.
    pub(crate) fn write_columns(rows: &[Row], columns: &[&str]) -> Vec<u8> {
        let field = |name: &str, t, rep| {
            Arc::new(
                Type::primitive_type_builder(name, t)
                    .with_repetition(rep)
                    .build()
                    .expect("field"),
            )
        };
        let all = [
            ("path", PhysicalType::BYTE_ARRAY, Repetition::OPTIONAL),
            ("offset", PhysicalType::INT64, Repetition::REQUIRED),
            ("size", PhysicalType::INT64, Repetition::REQUIRED),
            ("raw", PhysicalType::BYTE_ARRAY, Repetition::OPTIONAL),
        ];
        let kept: Vec<_> = all.iter().filter(|c| columns.contains(&c.0)).collect();
        let schema = Arc::new(
            Type::group_type_builder("schema")
                .with_fields(kept.iter().map(|c| field(c.0, c.1, c.2)).collect())
                .build()
                .expect("schema"),
        );
        let props = Arc::new(
            WriterProperties::builder()
                .set_compression(Compression::ZSTD(Default::default()))
                .build(),
        );
        let mut out = Vec::new();
        let mut writer = SerializedFileWriter::new(&mut out, schema, props).expect("writer");
        let mut rg = writer.next_row_group().expect("row group");
        for (name, _, _) in kept {
            let mut col = rg.next_column().expect("col").expect(name);
            let optional = |values: Vec<Option<&[u8]>>| {
                let defs: Vec<i16> = values.iter().map(|v| i16::from(v.is_some())).collect();
                let data: Vec<ByteArray> =
                    values.into_iter().flatten().map(ByteArray::from).collect();
                (defs, data)
            };
            match *name {
                "path" | "raw" => {
                    let (defs, data) = optional(
                        rows.iter()
                            .map(|r| {
                                if *name == "path" {
                                    r.0.map(str::as_bytes)
                                } else {
                                    r.3
                                }
                            })
                            .collect(),
                    );
                    col.typed::<ByteArrayType>()
                        .write_batch(&data, Some(&defs), None)
                        .expect("write");
                }
                _ => {
                    let values: Vec<i64> = rows
                        .iter()
                        .map(|r| if *name == "offset" { r.1 } else { r.2 })
                        .collect();
                    col.typed::<Int64Type>()
                        .write_batch(&values, None, None)
                        .expect("write");
                }
            }
            col.close().expect("close");
        }
        rg.close().expect("close");
        writer.close().expect("close");
        out
    }

    #[test]
    fn paths_need_offset_and_size_columns() {
        // Without a size column, rows that are inline or missing still read...
        let rows = [(None, 0, 0, Some(&b"ab"[..])), (None, 0, 0, None)];
        let decoded = decode(
            "x/refs.0.parq",
            Bytes::from(write_columns(&rows, &["path", "offset", "raw"])),
        )
        .expect("no path rows");
        assert_eq!(decoded.rows[1], Ref::MISSING);
        // ...but a path without its size is refused, naming the file, the column and the row.
        let rows = [(None, 0, 0, Some(&b"ab"[..])), (Some("a.h5"), 0, 16, None)];
        let e = decode(
            "x/refs.0.parq",
            Bytes::from(write_columns(&rows, &["path", "offset", "raw"])),
        )
        .expect_err("no size");
        assert_eq!(
            e.to_string(),
            "x/refs.0.parq: has no size column in row 1, which names the path a.h5: a reference to a path needs its offset and size (size 0 for the whole file)"
        );
        let e = decode(
            "x/refs.2.parq",
            Bytes::from(write_columns(&rows, &["path", "size", "raw"])),
        )
        .expect_err("no offset");
        assert!(
            e.to_string()
                .starts_with("x/refs.2.parq: has no offset column in row 1"),
            "{e}"
        );
    }

    #[test]
    fn row_semantics() {
        let data = write(&[
            (Some("a.h5"), 100, 20, None),
            (None, 0, 0, Some(b"inline")),
            (None, 0, 0, None),
            (Some("b.h5"), 0, 0, None),
            (Some("a.h5"), 0, 8, None),
        ]);
        let rows = decode("refs.0.parq", Bytes::from(data)).expect("decodes");
        assert_eq!(rows.paths, ["a.h5", "b.h5"]);
        assert_eq!(rows.rows.len(), 5);
        assert_eq!(
            rows.rows[0],
            Ref {
                offset: 100,
                length: 20,
                target: 0,
                kind: Kind::Range
            }
        );
        assert_eq!(rows.rows[1].kind, Kind::Inline);
        assert_eq!(&rows.inline(&rows.rows[1])[..], b"inline");
        assert_eq!(rows.rows[2], Ref::MISSING);
        assert_eq!((rows.rows[3].kind, rows.rows[3].target), (Kind::Whole, 1));
        assert_eq!((rows.rows[4].kind, rows.rows[4].length), (Kind::Range, 8));
    }

    #[test]
    fn malformed_files_name_the_file() {
        let e = decode("x/refs.3.parq", Bytes::from_static(b"not parquet")).expect_err("bad");
        assert!(e.to_string().contains("x/refs.3.parq"), "{e}");
        let e = decode(
            "x/refs.1.parq",
            Bytes::from(write(&[(Some("a"), -1, 4, None)])),
        )
        .expect_err("neg");
        assert!(e.to_string().contains("negative"), "{e}");
    }
}
