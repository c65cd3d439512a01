// Graph construction: layers, shapes, parameters.
#include "core/graph/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>

#include <unistd.h>


namespace trainer {

namespace {

// Bytes of physical memory (0 when unknown): no replica can hold parameters larger than that,
// since every device's weights are also kept on the host (initialisation, checkpoints).
uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

}  // namespace

Graph::Graph(const ModelSpec& spec, bool fold_padding) {
  static const uint64_t memory = physical_memory();
  uint64_t param_bytes = 0;
  std::map<std::string, int> index;
  std::map<std::string, int> group_owner;  // parameter group ("lstm_a") -> its first node
  std::map<std::string, int> param_owner;  // parameter name ("tokens/embeddings") -> the node that holds it
  std::vector<std::string> group_of;
  std::vector<ParamEntry> entries;
  for (const ModelInput& in : spec.inputs) {
    input_shapes_.push_back(in.shape);
    input_names_.push_back(in.name);
  }
  std::map<std::string, int> reads;  // per layer name: the inputs that name it, the output counted
  for (const LayerDef& def : spec.layers)
    for (const std::string& in : def.inputs) ++reads[in];
  ++reads[spec.output];
  for (const LayerDef& def : spec.layers) {
    const LayerInfo* info = find_layer(def.type);
    const cfg::Node& config = def.config.defined() ? def.config : def.node;
    cfg::MapReader reader(config, fmt::format("{} layer '{}'", def.type, def.params_of.empty() ? def.name : def.params_of));
    reader.allow({"name", "type", "inputs"});
    if (info->takes_activation) reader.allow({"activation"});
    GraphNode n;
    n.layer = info->make(reader);
    if (def.activation_of.empty()) reader.finish();  // else the mapping is its layer's, checked there
    n.layer->set_identity(def.name, def.type, def.node);

    std::vector<Shape> in_shapes;
    for (const std::string& in : def.inputs) {
      int k = spec.input_index(in);
      if (k >= 0) {
        n.inputs.push_back(-1 - k);
        in_shapes.push_back(input_shapes_[size_t(k)]);
      } else {
        int j = index.at(in);
        n.inputs.push_back(j);
        nodes_[size_t(j)].consumers++;
        in_shapes.push_back(nodes_[size_t(j)].shape);
      }
    }
    if (fold_padding && in_shapes.size() == 1 && !is_model_input(n.inputs[0]) && reads[def.inputs[0]] == 1)
      fold_pad(nodes_[size_t(n.inputs[0])], n, in_shapes[0]);
    int k = int(in_shapes.size());
    if (k < n.layer->min_inputs() || (n.layer->max_inputs() >= 0 && k > n.layer->max_inputs())) {
      std::string want = n.layer->max_inputs() < 0 ? fmt::format("at least {}", n.layer->min_inputs())
                         : n.layer->min_inputs() == n.layer->max_inputs() ? fmt::format("{}", n.layer->min_inputs())
                         : fmt::format("{} to {}", n.layer->min_inputs(), n.layer->max_inputs());
      def.node.fail(fmt::format("{} layer '{}' takes {} input(s), got {}", def.type, def.name, want, k));
    }
    n.shape = n.layer->infer(in_shapes);
    // Element counts must stay far from int64 overflow (a config can ask for absurd sizes).
    auto too_big = [](const Shape& sh) {
      int64_t c = 1;
      for (int64_t d : sh.dims())
        if (d > 0 && __builtin_mul_overflow(c, d, &c)) return true;
      return c > (int64_t(1) << 40);
    };
    if (too_big(n.shape))
      def.node.fail(fmt::format("{} layer '{}' would produce an output of more than 2^40 values per sample", def.type, def.name));
    for (const ParamSpec& p : n.layer->params())
      if (too_big(p.shape))
        def.node.fail(fmt::format("{} layer '{}' would have a parameter of more than 2^40 values", def.type, def.name));
    for (int64_t d : n.shape.dims())
      if (d <= 0)
        def.node.fail(fmt::format("{} layer '{}' would produce an empty output ({}) from input {}", def.type, def.name,
                                  n.shape.str(), in_shapes[0].str()));
    const std::string group = def.params_of.empty() ? def.name : def.params_of;
    const int self = int(nodes_.size());
    auto owner = group_owner.find(group);
    if (owner == group_owner.end()) {
      group_owner[group] = self;
      for (const ParamSpec& p : n.layer->params()) {
        if (!p.tied_to.empty()) {  // an earlier layer's parameter, used here too
          auto it = std::find_if(entries.begin(), entries.end(), [&](const ParamEntry& e) { return e.name == p.tied_to; });
          if (it == entries.end())
            def.node.fail(fmt::format("{} layer '{}' ties its {} to '{}', which is no parameter of an earlier layer "
                                      "(tie: names an embedding layer before it)",
                                      def.type, def.name, p.name, p.tied_to));
          if (it->spec.shape != p.shape)
            def.node.fail(fmt::format("{} layer '{}' ties its {} to '{}' of shape {}, but needs shape {} (units must be "
                                      "the embedding's input_dim, its input width the embedding's output_dim)",
                                      def.type, def.name, p.name, p.tied_to, it->spec.shape.str(), p.shape.str()));
          n.params.push_back(size_t(it - entries.begin()));
          n.tied.resize(n.params.size(), false);
          n.tied.back() = true;
          nodes_[size_t(param_owner.at(p.tied_to))].tie_users.push_back(self);
          continue;
        }
        param_owner[group + "/" + p.name] = self;
        n.params.push_back(entries.size());
        n.tied.resize(n.params.size(), false);
        entries.push_back({group + "/" + p.name, p, 0});
        param_bytes += uint64_t(p.shape.numel()) * sizeof(float);  // each below 2^40 values: no overflow
      }
      if (memory && param_bytes > memory)
        def.node.fail(fmt::format("the model's parameters reach {:.1f} GiB with {} layer '{}', more than this machine's "
                                  "{:.1f} GiB of memory", double(param_bytes) / double(1 << 30), def.type, def.name,
                                  double(memory) / double(1 << 30)));
    } else {  // a second use: the first node's parameters, which must fit these inputs
      GraphNode& o = nodes_[size_t(owner->second)];
      std::vector<ParamSpec> mine = n.layer->params(), theirs = o.layer->params();
      for (const ParamSpec& p : mine)
        if (!p.tied_to.empty())
          def.node.fail(fmt::format("layer '{}' shares '{}', whose {} is tied to '{}': a tied layer cannot be shared",
                                    def.name, group, p.name, p.tied_to));
      for (size_t p = 0; p < mine.size(); ++p)
        if (mine[p].shape != theirs[p].shape)
          def.node.fail(fmt::format("layer '{}' shares '{}', but its input {} would need {} of shape {}, not {}", def.name,
                                    group, in_shapes[0].str(), mine[p].name, mine[p].shape.str(), theirs[p].shape.str()));
      n.shares = owner->second;
      o.sharers.push_back(self);
    }
    group_of.push_back(group);
    index[def.name] = self;
    nodes_.push_back(std::move(n));
  }
  output_ = index.at(spec.output);
  params_ = ParamLayout(std::move(entries));
  frontier_.assign(nodes_.size() + 1, 0);
  // layout() reorders entries (trainable first): map each node's parameters by name again.
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < params_.entries().size(); ++i) by_name[params_.entries()[i].name] = i;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    GraphNode& n = nodes_[i];
    n.params.clear();
    n.tied.clear();
    for (const ParamSpec& p : n.layer->params()) {
      n.params.push_back(by_name.at(p.tied_to.empty() ? group_of[i] + "/" + p.name : p.tied_to));
      n.tied.push_back(!p.tied_to.empty());
    }
  }
  // A sharer's parameters are final only after their owner's backward: only owners count.
  frontier_[nodes_.size()] = params_.trainable_floats();
  for (size_t i = nodes_.size(); i-- > 0;) {
    frontier_[i] = frontier_[i + 1];
    if (nodes_[i].shares >= 0) continue;
    for (size_t k = 0; k < nodes_[i].params.size(); ++k) {  // a tied parameter is final at its owner's backward
      const ParamEntry& e = params_.entries()[nodes_[i].params[k]];
      if (e.spec.trainable && !nodes_[i].tied[k]) frontier_[i] = std::min(frontier_[i], e.offset);
    }
  }
}

// The pad_fold fast path: `pad`, read by `reader` alone, gives its zeros to the reader's windows and
// becomes an identity of its input's shape (`reader_input`, the pad's shape until now, becomes it).
void Graph::fold_pad(GraphNode& pad, GraphNode& reader, Shape& reader_input) {
  const std::optional<std::array<int, 4>> zeros = pad.layer->padding_to_fold();
  if (!zeros || !reader.layer->absorb_padding(*zeros)) return;
  pad.layer->fold_padding(reader.layer->name());
  const int j = pad.inputs[0];
  pad.shape = is_model_input(j) ? input_shapes_[size_t(model_input_index(j))] : nodes_[size_t(j)].shape;
  reader_input = pad.shape;
}

int Graph::node_index(const std::string& name) const {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].layer->name() == name) return int(i);
  return -1;
}

int64_t Graph::flops_per_sample() const {
  int64_t f = 0;
  for (const GraphNode& n : nodes_) f += n.layer->flops();
  return f;
}

}  // namespace trainer
