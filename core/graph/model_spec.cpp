// Flattening of `model:`: block expansion with parameters, input resolution, cycle checks.
#include "core/graph/model_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "core/graph/layer.h"
#include "core/io/utf8.h"
#include "core/ops/activation.h"

namespace trainer {

// Names become parameter names ("<layer>/kernel") in checkpoints and JSON: text without control
// characters or '/', not starting with '$'; at the top level not "optimizer" or "data", the
// prefixes of a checkpoint's own entries ("optimizer/<slot>/<parameter>", "data/mean"), which a
// parameter must never collide with.
std::string name_problem(const std::string& name, bool top_level) {
  if (name.empty()) return "it is empty";
  size_t at = 0;
  if (!valid_utf8(name, &at)) return fmt::format("byte {} is not UTF-8 text", at);
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f) return "it holds a control character";
  if (name.find('/') != std::string::npos) return "'/' separates scopes";
  if (name[0] == '$') return "'$' starts the names of block inputs";
  if (top_level && (name == "optimizer" || name == "data"))
    return fmt::format("checkpoints keep their own entries under '{}/'; choose another name", name);
  return "";
}

namespace {

constexpr int kMaxBlockDepth = 16;
// Layers after block expansion: blocks that use blocks multiply (ten blocks of ten blocks of ...),
// so the count is checked as layers are made, before work or memory proportional to it.
constexpr size_t kMaxLayers = 10000;

// A reference to a layer by the name it has in some scope (the top level or a block instance).
struct Ref {
  std::string name;
  int scope = 0;
  cfg::Node where;
};


struct Scope {
  std::string prefix;                // "incep1/" ("" at the top level)
  std::string block;                 // the block type ("" at the top level)
  std::vector<Ref> block_inputs;     // what $input means here
  std::map<std::string, Ref> local;  // local name -> its output (a layer, or a block's last layer)
  std::map<std::string, std::string> layer_of;  // local name -> expanded layer name (plain layers)
};

struct BlockDef {
  cfg::Node node;
  cfg::Node layers;
  std::vector<std::string> params;
  std::map<std::string, cfg::Node> defaults;
};

class Expander {
 public:
  Expander(const cfg::Node& model, std::vector<std::string> input_names) : input_names_(std::move(input_names)) {
    cfg::Node blocks = model.child("blocks");
    if (blocks.defined()) {
      if (!blocks.is_map()) blocks.fail("'model.blocks' must map block names to {params, layers}");
      for (const std::string& name : blocks.keys()) read_block(name, blocks.child(name));
    }
  }

  void expand_top(const cfg::Node& layers) {
    scopes_.push_back(Scope{});
    std::vector<Ref> all;
    for (const std::string& n : input_names_) {
      scopes_[0].local[n] = Ref{n, -1, layers};
      all.push_back(Ref{n, -1, layers});
    }
    expand_list(layers, 0, all, 0);
  }

  // Resolves every reference to an expanded layer name.
  std::string resolve(const Ref& r, const std::string& context, const char* verb = "names input") const {
    Ref cur = r;
    for (int hops = 0; hops < 64; ++hops) {
      if (cur.scope < 0) return cur.name;  // the model input
      const Scope& s = scopes_[size_t(cur.scope)];
      auto lit = s.layer_of.find(cur.name);
      if (lit != s.layer_of.end()) return lit->second;
      auto it = s.local.find(cur.name);
      if (it == s.local.end()) {
        std::vector<std::string> names;
        for (const auto& [k, v] : s.local) names.push_back(k);
        std::string in = s.block.empty() ? "the model" : fmt::format("block '{}'", s.block);
        cur.where.fail(fmt::format("{} {} '{}', which is not a layer of {}{}", context, verb, cur.name, in,
                                   cfg::suggestion(cur.name, names)));
      }
      cur = it->second;
    }
    r.where.fail("input references loop through blocks");
  }

  std::vector<LayerDef> defs;
  std::vector<std::vector<Ref>> def_inputs;
  std::vector<std::optional<Ref>> def_share;  // `share:` as written

 private:
  void read_block(const std::string& name, const cfg::Node& node) {
    cfg::MapReader r(node, fmt::format("block '{}'", name));
    BlockDef b;
    b.node = node;
    b.layers = r.required("layers");
    if (!b.layers.is_seq() || b.layers.size() == 0) b.layers.fail(fmt::format("block '{}' needs a non-empty list of layers", name));
    cfg::Node params = r.optional("params");
    if (params.is_map()) {
      for (const std::string& p : params.keys()) {
        b.params.push_back(p);
        cfg::Node d = params.child(p);
        if (d.defined()) b.defaults[p] = d;
      }
    } else if (params.defined()) {
      for (const cfg::Node& p : params.items()) b.params.push_back(p.as<std::string>());
    }
    r.finish();
    if (find_layer(name)) node.fail(fmt::format("block '{}' has the name of a built-in layer type", name));
    blocks_[name] = std::move(b);
  }

  // Expands one list of layers in scope `sc`; returns the reference to its last layer.
  Ref expand_list(const cfg::Node& list, int sc, std::vector<Ref> first_inputs, int depth) {
    if (!list.is_seq()) list.fail("'layers' must be a list of layers");
    std::vector<Ref> prev = std::move(first_inputs);
    Ref last;
    std::map<std::string, int> auto_names;
    for (const cfg::Node& item : list.items()) {
      if (!item.is_map()) item.fail("a layer must be a mapping like {name: conv1, type: conv2d, ...}");
      cfg::MapReader r(item, "layer");
      cfg::Node share = r.optional("share");
      std::string type = share.defined() ? r.get<std::string>("type", "") : r.get<std::string>("type");
      cfg::Node name_node = r.optional("name");
      std::string local = name_node.defined() ? name_node.as<std::string>()
                                              : fmt::format("{}_{}", type, ++auto_names[type]);
      if (std::string why = name_problem(local, scopes_[size_t(sc)].prefix.empty()); !why.empty())
        (name_node.defined() ? name_node : item).fail(fmt::format("'{}' is not a valid layer name: {}", local, why));
      Scope& s = scopes_[size_t(sc)];
      if (s.local.count(local))
        (name_node.defined() ? name_node : item)
            .fail(s.local.at(local).scope < 0 ? fmt::format("layer name '{}' is the name of a model input", local)
                                              : fmt::format("layer name '{}' is used twice", local));

      std::vector<Ref> inputs;
      cfg::Node in = r.optional("inputs");
      if (in.defined()) {
        for (const cfg::Node& i : in.items()) {
          std::string n = i.as<std::string>();
          if (n == "$input" || n == "$inputs") {
            if (s.block.empty()) i.fail("'$input' is only meaningful inside a block");
            for (Ref b : s.block_inputs) inputs.push_back(b);
          } else {
            inputs.push_back(Ref{n, sc, i});
          }
        }
        if (inputs.empty()) in.fail("'inputs' must name at least one layer");
      } else {
        inputs = prev;
      }

      std::string expanded = s.prefix + local;
      auto bit = blocks_.find(type);
      if (defs.size() >= kMaxLayers)
        item.fail(fmt::format("the model expands to more than {} layers here (blocks inside blocks multiply); a model "
                              "may have at most {}", kMaxLayers, kMaxLayers));
      if (share.defined()) {
        // A second use of a layer: only its name, inputs (and, if given, the same type) here.
        for (const std::string& k : item.keys())
          if (k != "name" && k != "inputs" && k != "share" && k != "type")
            item.child(k).fail(fmt::format("layer '{}' shares '{}' (its type, configuration and parameters): only name, "
                                           "inputs and share may be given, not '{}'", expanded, share.as<std::string>(), k));
        LayerDef d;
        d.name = expanded;
        d.type = type;
        d.node = item;
        defs.push_back(std::move(d));
        def_inputs.push_back(inputs);
        def_share.push_back(Ref{share.as<std::string>(), sc, share});
        Scope& s2 = scopes_[size_t(sc)];
        s2.layer_of[local] = expanded;
        s2.local[local] = Ref{local, sc, item};
        last = Ref{local, sc, item};
      } else if (bit != blocks_.end()) {
        if (depth >= kMaxBlockDepth) item.fail(fmt::format("blocks nest more than {} deep (does '{}' use itself?)", kMaxBlockDepth, type));
        last = expand_block(bit->first, bit->second, item, expanded, inputs, depth);
        scopes_[size_t(sc)].local[local] = last;
      } else {
        if (!find_layer(type)) {
          std::vector<std::string> known = layer_types();
          for (const auto& [k, v] : blocks_) known.push_back(k);
          r.required("type").fail(fmt::format("unknown layer type '{}'{}", type, cfg::suggestion(type, known)));
        }
        LayerDef d;
        d.name = expanded;
        d.type = type;
        d.node = item;
        d.config = item;
        defs.push_back(std::move(d));
        def_inputs.push_back(inputs);
        def_share.push_back(std::nullopt);
        Scope& s2 = scopes_[size_t(sc)];
        s2.layer_of[local] = expanded;
        s2.local[local] = Ref{local, sc, item};
        last = Ref{local, sc, item};
      }
      prev = {last};
    }
    return last;
  }

  Ref expand_block(const std::string& type, const BlockDef& b, const cfg::Node& item, const std::string& expanded,
                   const std::vector<Ref>& inputs, int depth) {
    cfg::MapReader r(item, fmt::format("layer '{}' (a '{}' block)", expanded, type));
    r.allow({"name", "type", "inputs"});
    auto env = std::make_shared<cfg::Bindings>();
    for (const std::string& p : b.params) {
      cfg::Node v = r.optional(p);
      if (v.defined()) {
        (*env)[p] = v;
      } else if (b.defaults.count(p)) {
        (*env)[p] = b.defaults.at(p);
      } else {
        item.fail(fmt::format("block '{}' needs parameter '{}'", type, p));
      }
    }
    r.finish();  // keys that are neither name/type/inputs nor parameters: did-you-mean over params
    Scope inner;
    inner.prefix = expanded + "/";
    inner.block = type;
    inner.block_inputs = inputs;
    scopes_.push_back(std::move(inner));
    int sc = int(scopes_.size()) - 1;
    cfg::Node layers = b.layers.with_bindings(env);
    return expand_list(layers, sc, inputs, depth + 1);
  }

  std::vector<std::string> input_names_;
  std::map<std::string, BlockDef> blocks_;
  std::vector<Scope> scopes_;
};

// Kahn's algorithm in file order; what remains is on a cycle, which is reported.
std::vector<LayerDef> topo_sort(std::vector<LayerDef> defs, const std::set<std::string>& input_names) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < defs.size(); ++i) index[defs[i].name] = i;
  std::vector<int> pending(defs.size(), 0);
  std::vector<std::vector<size_t>> users(defs.size());
  for (size_t i = 0; i < defs.size(); ++i)
    for (const std::string& in : defs[i].inputs)
      if (!input_names.count(in)) {
        ++pending[i];
        users[index.at(in)].push_back(i);
      }
  std::vector<LayerDef> out;
  std::vector<bool> done(defs.size(), false);
  std::set<size_t> ready;
  for (size_t i = 0; i < defs.size(); ++i)
    if (!pending[i]) ready.insert(i);
  while (!ready.empty()) {
    size_t i = *ready.begin();
    ready.erase(ready.begin());
    done[i] = true;
    out.push_back(defs[i]);
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.insert(u);
  }
  if (out.size() != defs.size()) {
    // Walk back along unfinished inputs until a layer repeats: that is the cycle.
    size_t start = 0;
    while (done[start]) ++start;
    std::vector<size_t> path;
    std::map<size_t, size_t> pos;
    size_t cur = start;
    while (!pos.count(cur)) {
      pos[cur] = path.size();
      path.push_back(cur);
      for (const std::string& in : defs[cur].inputs)
        if (!input_names.count(in) && !done[index.at(in)]) {
          cur = index.at(in);
          break;
        }
    }
    // path walks from consumers to producers: reversed, it is the data flow; start it at `cur`.
    std::vector<size_t> flow(path.begin() + long(pos[cur]), path.end());
    std::reverse(flow.begin(), flow.end());
    std::rotate(flow.begin(), std::find(flow.begin(), flow.end(), cur), flow.end());
    std::string cycle;
    for (size_t k : flow) cycle += defs[k].name + " -> ";
    cycle += defs[cur].name;
    defs[cur].node.fail("the layers form a cycle: " + cycle);
  }
  return out;
}

// `activation:` of the layers that take it (LayerInfo::takes_activation), own or shared: an
// activation (or softmax) layer "<name>/activation" after the layer, which every other reference
// to the layer now names, `output` included. An activation layer of softmax becomes a softmax layer.
void add_activation_layers(std::vector<LayerDef>& defs, std::string& output) {
  std::set<std::string> names;
  for (const LayerDef& d : defs) names.insert(d.name);
  std::map<std::string, std::string> activated;  // layer -> its activation layer
  std::vector<LayerDef> out;
  for (LayerDef& d : defs) {
    const cfg::Node& c = d.config.defined() ? d.config : d.node;
    // Keras's Activation("softmax"): an activation layer whose function is softmax is a softmax layer.
    if (d.type == "activation" && c.is_map())
      for (const char* key : {"function", "activation"})
        if (c.has(key) && c.child(key).is_scalar() && c.child(key).as<std::string>() == "softmax") d.type = "softmax";
    out.push_back(d);
    const LayerInfo* info = find_layer(d.type);
    if (!info || !info->takes_activation || !c.is_map() || !c.has("activation")) continue;
    const cfg::Node act = c.child("activation");
    const std::string f = act.as<std::string>();
    if (f == "linear") continue;  // Keras's default: none
    if (f != "softmax" && !parse_activation(f)) {
      std::vector<std::string> known = {"softmax", "swish", "hard_swish"};
      for (const char* const* n = activation_names(); *n; ++n) known.push_back(*n);
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      act.fail(fmt::format("'{}' is not an activation{}; known: {}", f, cfg::suggestion(f, known), list));
    }
    LayerDef a;
    a.name = d.name + "/activation";
    if (names.count(a.name)) act.fail(fmt::format("layer '{}' is also the name of another layer", a.name));
    a.type = f == "softmax" ? "softmax" : "activation";
    a.node = act;
    a.config = c;
    a.inputs = {d.name};
    a.activation_of = d.name;
    activated[d.name] = a.name;
    out.push_back(std::move(a));
  }
  for (LayerDef& d : out)
    if (d.activation_of.empty())
      for (std::string& in : d.inputs)
        if (activated.count(in)) in = activated.at(in);
  if (activated.count(output)) output = activated.at(output);
  defs = std::move(out);
}

}  // namespace

int ModelSpec::input_index(const std::string& name) const {
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].name == name) return int(k);
  return -1;
}

namespace {

Shape read_input_shape(const cfg::Node& input, const std::string& what) {
  std::vector<int64_t> dims;
  for (const cfg::Node& d : input.items()) {
    int64_t v = d.as<int64_t>();
    if (v <= 0 || v > (1 << 20)) d.fail("input dimensions must be between 1 and 1048576");
    dims.push_back(v);
  }
  if (dims.empty() || dims.size() > 3)
    input.fail(fmt::format("'{}' must be [height, width, channels], [steps, features] or [features]", what));
  return Shape(dims);
}

}  // namespace

ModelSpec parse_model(const cfg::Node& model) {
  cfg::MapReader r(model, "the model section");
  ModelSpec spec;
  cfg::Node input = r.optional("input"), inputs = r.optional("inputs");
  if (input.defined() == inputs.defined())
    (input.defined() ? inputs : model).fail("the model needs either 'input: [...]' or 'inputs: [{name, shape}, ...]'");
  if (input.defined()) {
    spec.inputs.push_back({"input", read_input_shape(input, "model.input"), input});
    spec.input = spec.inputs[0].shape;
  } else {
    if (!inputs.is_seq() || inputs.size() == 0) inputs.fail("'model.inputs' must be a list of {name, shape}");
    int64_t total = 0;
    for (const cfg::Node& item : inputs.items()) {
      cfg::MapReader ir(item, "a model input");
      std::string name = ir.get<std::string>("name");
      Shape shape = read_input_shape(ir.required("shape"), "shape");
      ir.finish();
      if (std::string why = name_problem(name, false); !why.empty())
        item.fail(fmt::format("'{}' is not a valid input name: {}", name, why));
      if (spec.input_index(name) >= 0) item.fail(fmt::format("input name '{}' is used twice", name));
      spec.inputs.push_back({name, shape, item});
      total += shape.numel();
    }
    spec.input = spec.inputs.size() == 1 ? spec.inputs[0].shape : Shape{total};
  }
  r.allow({"blocks"});
  cfg::Node layers = r.required("layers");
  cfg::Node output = r.optional("output");
  r.finish();

  std::vector<std::string> input_names;
  for (const ModelInput& in : spec.inputs) input_names.push_back(in.name);
  Expander ex(model, input_names);
  ex.expand_top(layers);
  if (ex.defs.empty()) layers.fail("the model has no layers");
  std::map<std::string, size_t> names;
  for (size_t i = 0; i < ex.defs.size(); ++i) {
    LayerDef& d = ex.defs[i];
    for (const Ref& ref : ex.def_inputs[i]) d.inputs.push_back(ex.resolve(ref, fmt::format("layer '{}'", d.name)));
    if (std::find(d.inputs.begin(), d.inputs.end(), d.name) != d.inputs.end())
      d.node.fail(fmt::format("layer '{}' takes its own output as input", d.name));
    if (spec.input_index(d.name) >= 0) d.node.fail(fmt::format("layer '{}' has the name of a model input", d.name));
  }
  // `share:` targets: resolved to the layer that owns the parameters (following chains).
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < ex.defs.size(); ++i) by_name[ex.defs[i].name] = i;
  for (size_t i = 0; i < ex.defs.size(); ++i) {
    if (!ex.def_share[i]) continue;
    LayerDef& d = ex.defs[i];
    std::string target = ex.resolve(*ex.def_share[i], fmt::format("layer '{}'", d.name), "shares");
    size_t j = by_name.count(target) ? by_name.at(target) : i;
    for (int hops = 0; hops < 64 && ex.def_share[j]; ++hops) {
      std::string t = ex.resolve(*ex.def_share[j], "share");
      if (!by_name.count(t)) break;
      j = by_name.at(t);
    }
    if (!by_name.count(target) || j == i || ex.def_share[j])
      ex.def_share[i]->where.fail(fmt::format("layer '{}' shares '{}', which is not a layer with parameters of its own",
                                              d.name, ex.def_share[i]->name));
    const LayerDef& owner = ex.defs[j];
    if (!d.type.empty() && d.type != owner.type)
      d.node.fail(fmt::format("layer '{}' is a {} but shares '{}', a {}", d.name, d.type, owner.name, owner.type));
    d.type = owner.type;
    d.config = owner.node;
    d.params_of = owner.name;
  }
  spec.output = ex.defs.back().name;
  if (output.defined()) {
    std::string o = output.as<std::string>();
    bool found = false;
    for (const LayerDef& d : ex.defs) found |= d.name == o;
    if (!found) {
      std::vector<std::string> all;
      for (const LayerDef& d : ex.defs) all.push_back(d.name);
      output.fail(fmt::format("output '{}' is not a layer{}", o, cfg::suggestion(o, all)));
    }
    spec.output = o;
  }
  add_activation_layers(ex.defs, spec.output);
  spec.layers = topo_sort(std::move(ex.defs), std::set<std::string>(input_names.begin(), input_names.end()));
  return spec;
}

}  // namespace trainer
