// SIGINT / SIGTERM taken by one waiting thread instead of a handler (no global state): blocked in
// every thread started after construction, delivered to on_signal on the watcher's thread.
#pragma once

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <functional>
#include <thread>

namespace specd::cli {

class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  }
  // Calls on_signal(signal) for each signal that comes, until destruction.
  void Start(std::function<void(int)> on_signal) {
    thread_ = std::thread([this, on_signal] {
      for (;;) {
        int signal = 0;
        sigwait(&signals_, &signal);
        if (!armed_) return;
        on_signal(signal);
      }
    });
  }
  ~SignalWatcher() {
    armed_ = false;  // what on_signal would act on may be gone already
    if (thread_.joinable()) {
      pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait
      thread_.join();
    }
  }

 private:
  sigset_t signals_;
  std::atomic<bool> armed_{true};
  std::thread thread_;
};

}  // namespace specd::cli
