// The `data:` section reader.
#include "core/data/data_spec.h"

namespace trainer {

DatasetContext DataSpec::context(const std::string& base_dir) const {
  DatasetContext dc;
  dc.base_dir = base_dir;
  dc.skip_corrupt = skip_corrupt;
  dc.max_image_bytes = max_image_bytes;
  return dc;
}

DataSpec read_data(const cfg::Node& section) {
  cfg::MapReader r(section, "the data section");
  DataSpec d;
  d.section = section;
  const DatasetContext dc = read_data_context(r, ".");
  d.skip_corrupt = dc.skip_corrupt;
  d.max_image_bytes = dc.max_image_bytes;
  d.train = r.required("train");
  d.val = r.optional("val");
  d.test = r.optional("test");  // read by `trainer eval --split test`
  d.validation_split = r.get_float("validation_split", 0.0, 0.0, 0.99);
  if (d.val.defined() && d.validation_split > 0)
    r.required("validation_split").fail("give either data.val or data.validation_split, not both");
  d.augment_node = r.optional("augment");
  d.augment = parse_augment(d.augment_node);
  if (cfg::Node w = r.optional("workers"); w.defined()) d.workers = int(r.get_int("workers", 0, 0, 64));
  r.finish();
  return d;
}

}  // namespace trainer
