// Device selection: turns the config's/CLI's request into the devices of this run, or a
// DeviceError (exit code 4) that says what is visible.
#pragma once
#include <stdexcept>
#include <vector>

#include "core/engine/experiment.h"
#include "core/tensor/device.h"

namespace trainer {

std::vector<Device> select_devices(const DeviceRequest& r);
// One line per visible device, for `trainer devices`.
std::vector<std::string> describe_devices();

}  // namespace trainer
