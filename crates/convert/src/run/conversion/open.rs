//! Opening a conversion's source and planning it, with the warnings and refusals that need
//! only the options and the source.

use super::*;

impl Conversion {
    /// Opens `source` and plans the conversion into `destination`.
    pub(super) fn open_source(
        &self,
        source: &Location,
        destination: Location,
        runtime: Arc<IoRuntime>,
    ) -> Result<Opened> {
        let source_options = crate::plan::input::ReadOptions {
            memory_limit: Some(self.memory_limit.unwrap_or_else(memory::default_limit)),
            ..self.source_options.clone()
        };
        let input = Input::open(source, &source_options, runtime.clone())?;
        let (mut nodes, skipped) = input.nodes_skipping(&source_options)?;
        let ome_warnings = zshard_zarr::ome::apply(&mut nodes, self.ome)?;
        let files = input.ome_files(&nodes)?;
        let (mut nodes, made) = match &self.pyramid {
            Some(pyramid) => {
                let (nodes, made) =
                    crate::plan::pyramid::make(nodes, pyramid, &self.layouts, &input.url())?;
                (nodes, Some(made))
            }
            None => (nodes, None),
        };
        // The version asked for (`--ome 0.6`) is written once the pyramid's image is made in 0.5.
        zshard_zarr::ome::finish(&mut nodes, self.ome)?;
        // Counted before any is planned: a plan of every array stays for the whole run. A small plan
        // costs little to make, and the budget's refusal (which names the limit needed) stands.
        let arrays = nodes
            .iter()
            .filter(|node| matches!(node.kind, zshard_core::NodeKind::Array(_)))
            .count();
        let limit = source_options
            .memory_limit
            .unwrap_or_else(memory::default_limit);
        let held = memory::plan_bytes(arrays).saturating_add(input.memory_bytes());
        if held > limit && memory::plan_bytes(arrays) > memory::LARGE_PLAN_BYTES {
            return Err(Error::TooManyArrays {
                location: input.url(),
                arrays: arrays as u64,
                bytes: held,
                bytes_per_array: memory::PLAN_BYTES_PER_ARRAY,
                limit,
            });
        }
        let url = input.url();
        let settings_warnings = self.settings_warnings(&destination);
        let plan_with = |auto_max_chunks| -> Result<Plan> {
            let on_unsupported = self.source_options.on_unsupported;
            let mut plan = Plan::new(&nodes, &self.layouts, &url, on_unsupported, auto_max_chunks)?;
            plan.warnings = ome_warnings.clone();
            plan.warnings.extend(settings_warnings.iter().cloned());
            plan.skipped.splice(0..0, skipped.iter().cloned());
            plan.files = files.clone();
            if let Some(made) = &made {
                made.apply(&mut plan)?;
            }
            Ok(plan)
        };
        let mut auto_max_chunks = zshard_core::AUTO_SHARD_MAX_CHUNKS;
        let plan = plan_with(auto_max_chunks)?;
        let mut source_id = source_id(source);
        if let Some(made) = &made {
            // A pyramid made with another reduction is another conversion.
            source_id.push_str(&format!(" (pyramid, {})", made.reduction));
        }
        let mut opened = Opened {
            input,
            plan,
            source_id,
            runtime,
            destination,
        };
        // An automatic shard shape whose index does not fit the memory limit is made smaller (halving
        // its inner chunks) until it fits; a shape the user gave stays and is refused by the budget.
        while auto_max_chunks > 1
            && self
                .budget(&opened)
                .is_err_and(|e| is_shard_index_refusal(&e))
        {
            auto_max_chunks /= 2;
            let smaller = plan_with(auto_max_chunks)?;
            if smaller.layouts() == opened.plan.layouts() {
                break;
            }
            opened.plan = smaller;
        }
        if auto_max_chunks < zshard_core::AUTO_SHARD_MAX_CHUNKS {
            opened.plan.warnings.push(format!(
                "automatic shard shapes hold at most {auto_max_chunks} inner chunks here, so that \
                 their index fits the memory limit"
            ));
        }
        Ok(opened)
    }

    /// What the run does otherwise than its settings say: threads and I/O threads beyond their caps
    /// ([`capped_threads`](crate::threads::capped_threads),
    /// [`capped_io_threads`](crate::threads::capped_io_threads)), a part size below what object
    /// stores take (raised to [`memory::MIN_PART_SIZE`] by the store).
    pub(super) fn settings_warnings(&self, destination: &Location) -> Vec<String> {
        let io_threads = self.io_threads.map(crate::threads::capped_io_threads);
        let mut warnings: Vec<String> = crate::threads::capped_threads(self.threads)
            .1
            .into_iter()
            .chain(io_threads.and_then(|(_, warning)| warning))
            .collect();
        let part_size = self.store_options.part_size;
        if destination.is_remote() && part_size < memory::MIN_PART_SIZE {
            let min = zshard_core::HumanBytes(memory::MIN_PART_SIZE as u64);
            warnings.push(format!(
                "{} is below the {min} object stores take as a part: parts of {min} are used",
                zshard_core::Setting::PartSize.given(zshard_core::HumanBytes(part_size as u64)),
            ));
        }
        warnings
    }
}
