// Names of the public value types (include/uroce/types.h), as libibverbs' *_str() functions
// spell them.
#include "uroce/types.h"

namespace uroce {

const char* errc_name(Errc e) {
  switch (e) {
    case Errc::kOk:
      return "success";
    case Errc::kPermission:
      return "operation not permitted";
    case Errc::kNoEntry:
      return "no such entry";
    case Errc::kInterrupted:
      return "interrupted";
    case Errc::kNoMemory:
      return "out of memory";
    case Errc::kBadAddress:
      return "bad address";
    case Errc::kBusy:
      return "resource busy";
    case Errc::kInvalidArgument:
      return "invalid argument";
    case Errc::kNoSpace:
      return "no space";
    case Errc::kNotSupported:
      return "operation not supported";
  }
  return "unknown error";
}

const char* qp_state_name(QpState s) {
  switch (s) {
    case QpState::kReset:
      return "RESET";
    case QpState::kInit:
      return "INIT";
    case QpState::kRtr:
      return "RTR";
    case QpState::kRts:
      return "RTS";
    case QpState::kSqd:
      return "SQD";
    case QpState::kSqe:
      return "SQE";
    case QpState::kErr:
      return "ERR";
  }
  return "unknown";
}

const char* wc_status_name(WcStatus s) {
  // ibv_wc_status_str()
  switch (s) {
    case WcStatus::kSuccess:
      return "success";
    case WcStatus::kLocLenErr:
      return "local length error";
    case WcStatus::kLocQpOpErr:
      return "local QP operation error";
    case WcStatus::kLocEecOpErr:
      return "local EE context operation error";
    case WcStatus::kLocProtErr:
      return "local protection error";
    case WcStatus::kWrFlushErr:
      return "Work Request Flushed Error";
    case WcStatus::kMwBindErr:
      return "memory management operation error";
    case WcStatus::kBadRespErr:
      return "bad response error";
    case WcStatus::kLocAccessErr:
      return "local access error";
    case WcStatus::kRemInvReqErr:
      return "remote invalid request error";
    case WcStatus::kRemAccessErr:
      return "remote access error";
    case WcStatus::kRemOpErr:
      return "remote operation error";
    case WcStatus::kRetryExcErr:
      return "transport retry counter exceeded";
    case WcStatus::kRnrRetryExcErr:
      return "RNR retry counter exceeded";
    case WcStatus::kLocRddViolErr:
      return "local RDD violation error";
    case WcStatus::kRemInvRdReqErr:
      return "remote invalid RD request";
    case WcStatus::kRemAbortErr:
      return "aborted error";
    case WcStatus::kInvEecnErr:
      return "invalid EE context number";
    case WcStatus::kInvEecStateErr:
      return "invalid EE context state";
    case WcStatus::kFatalErr:
      return "fatal error";
    case WcStatus::kRespTimeoutErr:
      return "response timeout error";
    case WcStatus::kGeneralErr:
      return "general error";
  }
  return "unknown";
}

}  // namespace uroce
