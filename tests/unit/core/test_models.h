// Model definitions the engine tests share, as YAML text: MiniGoogLeNet's blocks.
#pragma once

namespace trainer::test {

// MiniGoogLeNet's three blocks (the `blocks:` section of a model, indented for it): conv_module
// (conv2d, batch norm, ReLU), inception (a 1x1 and a 3x3 conv_module joined by concat) and
// downsample (a stride-2 conv_module and a max pooling joined by concat).
inline const char* kMiniGoogLeNetBlocks = R"(  blocks:
    conv_module:
      params: {filters: null, kernel: 3, stride: 1, padding: same}
      layers:
        - {name: conv, type: conv2d, filters: $filters, kernel: $kernel, strides: $stride, padding: $padding}
        - {name: bn, type: batchnorm}
        - {name: relu, type: relu}
    inception:
      params: [k1x1, k3x3]
      layers:
        - {name: conv_1x1, type: conv_module, filters: $k1x1, kernel: 1, inputs: [$input]}
        - {name: conv_3x3, type: conv_module, filters: $k3x3, kernel: 3, inputs: [$input]}
        - {name: concat, type: concat, inputs: [conv_1x1, conv_3x3]}
    downsample:
      params: [filters]
      layers:
        - {name: conv_3x3, type: conv_module, filters: $filters, kernel: 3, stride: 2, padding: valid, inputs: [$input]}
        - {name: pool, type: max_pool2d, pool: 3, strides: 2, inputs: [$input]}
        - {name: concat, type: concat, inputs: [conv_3x3, pool]}
)";

}  // namespace trainer::test
